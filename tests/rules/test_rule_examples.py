"""Every rule's documented examples are its test cases.

For each rule: each bad example must produce that rule's diagnostic (and only that rule's, when only that
rule is selected); each good example none of it; a bad example with ``fixed`` must fix (safe and unsafe
fixes, to a fixpoint) to exactly that text; a bad example without ``fixed`` must offer no applicable fix.
"""

from __future__ import annotations

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import fix_source, lint_source
from npu_lint.rules.base import REGISTRY, load_rule_modules

load_rule_modules()
FILE_RULES = sorted(REGISTRY.items())

BAD = [
    pytest.param(code, i, ex, id=f"{code}-bad{i}")
    for code, rule in FILE_RULES
    for i, ex in enumerate(rule.bad, 1)
]
GOOD = [
    pytest.param(code, i, ex, id=f"{code}-good{i}")
    for code, rule in FILE_RULES
    for i, ex in enumerate(rule.good, 1)
]


def _src(example) -> SourceFile:
    return SourceFile.from_text(example.path, example.source)


# rules whose examples need the rest of a VeOmni tree (the files an import or a call resolves to): the example
# is written into a small tree in tmp_path beside these files and linted with that tree's project
TREE_CONTEXT: dict[str, dict[str, str]] = {
    "NPU234": {
        "pyproject.toml": "[project]\nname = 'veomni'\n",
        "veomni/__init__.py": "",
        "veomni/ops/install.py": "def apply_ops_patch():\n    ALL_ATTENTION_FUNCTIONS.update(ADAPTERS)\n",
        "veomni/ops/kernels/__init__.py": '"""Adapters are installed by ``apply_ops_patch``."""\n',
    },
    "NPU320": {
        "pyproject.toml": "[project]\nname = 'veomni'\n",
        "veomni/__init__.py": "",
        "veomni/ops/__init__.py": "",
        "veomni/ops/kernels/gated_delta_rule/_ascend/_ops.py": (
            "import torch\n\n\n"
            '@torch.library.custom_op("veomni_gdr::chunk_fwd_o", mutates_args=())\n'
            "def chunk_fwd_o(q, k, v, h, g, scale: float):\n"
            "    return q\n"
        ),
    },
    "NPU323": {
        "pyproject.toml": "[project]\nname = 'veomni'\n",
        "veomni/__init__.py": "",
        "veomni/ops/__init__.py": "",
        "veomni/ops/kernels/toy_scan/__init__.py": (
            "def _npu_factory():\n"
            "    try:\n"
            "        from ._ascend.scan import chunk_scan\n"
            "    except ModuleNotFoundError as e:\n"
            '        if e.name == "scan_npu":\n'
            '            raise RuntimeError("install scan_npu") from e\n'
            "        raise\n"
            "    return chunk_scan\n"
        ),
    },
    "NPU324": {
        "pyproject.toml": "[project]\nname = 'veomni'\n",
        "veomni/__init__.py": "",
        "veomni/ops/__init__.py": "",
        "veomni/ops/kernels/toy_gdr/_ascend/triton/cumsum.py": "def chunk_cumsum(g, cu_seqlens=None):\n    return g\n",
        "veomni/ops/kernels/toy_gdr/_ascend/triton_core/cumsum.py": (
            "def chunk_cumsum(g, cu_seqlens=None, chunk_indices=None):\n    return g\n"
        ),
    },
    "NPU509": {
        "pyproject.toml": "[project]\nname = 'veomni'\n",
        "veomni/__init__.py": "",
        "veomni/utils/__init__.py": "",
        "veomni/utils/device.py": "def get_device_type():\n    return 'cpu'\n",
        "veomni/ops/__init__.py": "",
        "veomni/ops/optional_kernels.py": "fused_rope = None\n",
        "veomni/models/__init__.py": "",
    },
    "NPU624": {
        "pyproject.toml": "[project]\nname = 'veomni'\n",
        "veomni/__init__.py": "",
        "veomni/models/__init__.py": "",
        "veomni/models/transformers/__init__.py": "",
        "veomni/models/transformers/toy_vl_moe/__init__.py": "",
        "veomni/models/transformers/toy_vl_moe/toy_vl_moe_gpu_patch_gen_config.py": (
            "from veomni.patchgen.patch_spec import PatchConfig\n\n"
            "config = PatchConfig(\n"
            '    source_module="transformers.models.qwen3_vl_moe.modeling_qwen3_vl_moe",\n'
            '    target_file="patched_modeling_toy_vl_moe_gpu.py",\n'
            ")\n\n\n"
            '@config.override_method("Qwen3VLMoeForConditionalGeneration.get_parallel_plan")\n'
            "def get_parallel_plan_patched(self):\n"
            "    from ..parallel_plan import get_parallel_plan\n\n"
            "    return get_parallel_plan()\n"
        ),
    },
}


def _lint(code: str, example, tmp_path) -> list:
    if code not in TREE_CONTEXT:
        return lint_source(_src(example), [code], Settings())
    from npu_lint.veomni.project import load_project

    for rel, text in TREE_CONTEXT[code].items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    path = tmp_path / example.path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(example.source)
    project = load_project([str(path)])
    return lint_source(SourceFile.from_text(str(path), example.source), [code], Settings(), project)


def test_every_rule_is_documented() -> None:
    for code, rule in FILE_RULES:
        assert rule.name and rule.summary and rule.why and rule.fix_safety, code
        assert rule.bad, f"{code} has no bad example"
        assert rule.good, f"{code} has no good example"


@pytest.mark.parametrize("code,index,example", BAD)
def test_bad_example_is_reported(code: str, index: int, example, tmp_path) -> None:
    diags = _lint(code, example, tmp_path)
    assert diags, f"{code} bad example {index} produced no diagnostic"
    assert {d.code for d in diags} == {code}


@pytest.mark.parametrize("code,index,example", GOOD)
def test_good_example_is_clean(code: str, index: int, example, tmp_path) -> None:
    diags = _lint(code, example, tmp_path)
    assert not diags, [f"{d.line}:{d.col} {d.message}" for d in diags]


@pytest.mark.parametrize("code,index,example", BAD)
def test_bad_example_fix(code: str, index: int, example) -> None:
    outcome = fix_source(_src(example), [code], Settings(), unsafe=True)
    if example.expected is None:
        assert outcome.text == example.source, "a fix was applied but the example documents none"
    else:
        assert outcome.text == example.expected
        again = fix_source(SourceFile.from_text(example.path, outcome.text), [code], Settings(), unsafe=True)
        assert again.text == outcome.text, "a second fix pass changed the text"
