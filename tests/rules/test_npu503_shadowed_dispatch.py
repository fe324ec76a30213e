"""NPU503: an architecture test of a registered loader that no architecture reaches (issue 20, registration of
every model type of a VLM). Shapes of our own: elif chains, consecutive returning ifs, suffix and equality tests;
reported at the unreachable test, with the class that is never built."""

from __future__ import annotations

from pathlib import Path

from tests.rules.test_packaging_examples import CONTEXT, TOY, _build, _run

LOADER = """
from ...loader import MODELING_REGISTRY


@MODELING_REGISTRY.register("toy")
@MODELING_REGISTRY.register("toy_text")
def load_toy(arch: str):
    from .generated.patched_modeling_toy_gpu import (
        ToyForCausalLM,
        ToyForConditionalGeneration,
        ToyForTokenClassification,
        ToyModel,
    )

    FIRST
    SECOND
    return ToyForCausalLM
"""


def _findings(tmp_path: Path, first: str, second: str) -> list[str]:
    text = LOADER.replace("    FIRST\n", first).replace("    SECOND\n", second)
    _build(tmp_path, CONTEXT["NPU503"], f"{TOY}/__init__.py", text)
    out = _run(tmp_path, "NPU503").stdout
    return [line.split(f"{TOY}/__init__.py:")[1] for line in out.splitlines() if " NPU503 " in line]


def test_elif_chain_broad_model_test_first(tmp_path: Path) -> None:
    first = '    if "Model" in arch:\n        return ToyModel\n'
    second = '    elif arch == "ToyModel":\n        return ToyForTokenClassification\n'
    found = _findings(tmp_path, first, second)
    assert len(found) == 1 and found[0].startswith("16:"), found
    assert "`ToyForTokenClassification` is built for no checkpoint" in found[0]
    assert "line 14" in found[0]


def test_suffix_tests(tmp_path: Path) -> None:
    first = '    if arch.endswith("Generation"):\n        return ToyForConditionalGeneration\n'
    second = '    if arch.endswith("ConditionalGeneration"):\n        return ToyForTokenClassification\n'
    assert [f[:3] for f in _findings(tmp_path, first, second)] == ["16:"]
    # a prefix test is not covered by a suffix test
    second = '    if arch.startswith("ToyForToken"):\n        return ToyForTokenClassification\n'
    assert _findings(tmp_path, first, second) == []


def test_narrow_test_first_and_non_returning_branch_are_quiet(tmp_path: Path) -> None:
    first = '    if "ForTokenClassification" in arch:\n        return ToyForTokenClassification\n'
    second = '    if "For" in arch:\n        return ToyForConditionalGeneration\n'
    assert _findings(tmp_path, first, second) == []
    # the broad branch does not return: the narrow test after it is still reached
    first = '    if "For" in arch:\n        print(arch)\n'
    second = (
        '    if "ForConditionalGeneration" in arch:\n        return ToyForConditionalGeneration\n'
        '    if "Model" in arch:\n        return ToyModel\n'
        '    if "TokenClassification" in arch:\n        return ToyForTokenClassification\n'
    )
    assert _findings(tmp_path, first, second) == []
