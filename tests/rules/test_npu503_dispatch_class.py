"""NPU503: a registered loader's architecture test and the class its branch returns disagree (mutation round,
registration region): a negated test (`"ForCausalLM" not in architecture`) returning the class it names, or a
test for one head returning another head's class. The shapes are the real loaders of deepseek_v3, qwen3_5 and
qwen2_5_omni (veomni-main) with one test negated or one class swapped; the unmutated chains stay quiet."""

from __future__ import annotations

from pathlib import Path

from tests.rules.test_npu503_shadowed_dispatch import _findings

CHAIN = (
    '    if "ForCausalLM" in arch:\n        return ToyForCausalLM\n'
    '    elif "ForTokenClassification" in arch:\n        return ToyForTokenClassification\n'
)
TAIL = '    elif "Model" in arch:\n        return ToyModel\n'
GENERATION = '    if arch.endswith("ConditionalGeneration"):\n        return ToyForConditionalGeneration\n'


def test_real_chains_are_quiet(tmp_path: Path) -> None:
    assert _findings(tmp_path, CHAIN, TAIL) == []
    assert _findings(tmp_path, GENERATION, '    if "Model" in arch:\n        return ToyModel\n') == []


def test_negated_test_returns_the_class_it_names(tmp_path: Path) -> None:
    # deepseek_v3: "ForCausalLM" in architecture -> not in
    found = _findings(tmp_path, CHAIN.replace('"ForCausalLM" in', '"ForCausalLM" not in'), TAIL)
    assert [f[:3] for f in found] == ["14:"] and "do not name `ForCausalLM`" in found[0], found
    # qwen3_5: "Model" in architecture -> not in
    found = _findings(tmp_path, CHAIN, TAIL.replace('"Model" in', '"Model" not in'))
    assert [f[:3] for f in found] == ["18:"], found
    # a suffix test negated
    found = _findings(tmp_path, GENERATION.replace("if arch.endswith", "if not arch.endswith"), "")
    assert [f[:3] for f in found] == ["14:"], found


def test_head_test_returns_another_head(tmp_path: Path) -> None:
    # qwen2_5_omni / deepseek_v4: a branch's class swapped for its neighbour's
    swapped = CHAIN.replace("return ToyForTokenClassification", "return ToyForCausalLM")
    found = _findings(tmp_path, swapped, TAIL)
    assert [f[:3] for f in found] == ["16:"] and "`ForTokenClassification`" in found[0], found
