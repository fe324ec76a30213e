"""Precision review rev18: correct variants in VeOmni's shapes that the reviewed rules reported; each must stay
quiet (and the rules' true positives keep reporting: their own dev tests)."""

from __future__ import annotations

import pytest

from tests.rules.snippets import lint_snippet

# -- NPU215: an NPU backend sharing a general package with a sibling while requiring torch_npu itself ----------
_TABLE_215 = """
from ...config.registry import BackendSpec, OpSpec, register_op

register_op(
    OpSpec(
        name="layer_norm",
        config_field="layer_norm_implementation",
        backends={{
            "{sibling}": BackendSpec(entry="veomni.ops.kernels.layer_norm.x:forward", requires=("{sibling}", "{shared}")),
            "npu": BackendSpec(entry="veomni.ops.kernels.layer_norm.npu:forward", requires=("torch_npu", "{shared}")),
        }},
    )
)
"""


@pytest.mark.parametrize(
    "sibling,shared", [("eager", "einops"), ("triton", "packaging"), ("liger_kernel", "torch")]
)
def test_npu215_shared_general_package_beside_torch_npu(sibling: str, shared: str) -> None:
    text = _TABLE_215.format(sibling=sibling, shared=shared)
    assert lint_snippet("veomni/ops/kernels/layer_norm/__init__.py", text, ["NPU215"]) == []


def test_npu215_gpu_vendor_beside_torch_npu_still_reports() -> None:
    text = _TABLE_215.format(sibling="liger_kernel", shared="flash_attn")
    assert [d.code for d in lint_snippet("veomni/ops/kernels/layer_norm/__init__.py", text, ["NPU215"])] == [
        "NPU215"
    ]


# -- NPU212: an NPU fallback entry added to the table by a module-level statement after its literal -------------
_OPS_212 = """
from dataclasses import dataclass, field
from typing import Dict

_NPU_ALLOWED: Dict[str, frozenset] = {
    "rms_norm_implementation": frozenset({"npu"}),
    "moe_implementation": frozenset({"fused_npu"}),
}
_NPU_DEFAULT_FALLBACK: Dict[str, str] = {
    "moe_implementation": "fused_npu",
}
{later}


@dataclass
class OpsImplementationConfig:
    rms_norm_implementation: str = field(default="liger_kernel")
    moe_implementation: str = field(default="fused_triton")
"""


@pytest.mark.parametrize(
    "later",
    [
        '_NPU_DEFAULT_FALLBACK["rms_norm_implementation"] = "npu"',
        '_NPU_DEFAULT_FALLBACK.update({"rms_norm_implementation": "npu"})',
        '_NPU_DEFAULT_FALLBACK.update(rms_norm_implementation="npu")',
        '_NPU_DEFAULT_FALLBACK.setdefault("rms_norm_implementation", "npu")',
        '_NPU_DEFAULT_FALLBACK |= {"rms_norm_implementation": "eager"}',
    ],
)
def test_npu212_entry_added_after_the_literal(later: str) -> None:
    text = _OPS_212.replace("{later}", later)
    assert lint_snippet("veomni/arguments/arguments_types.py", text, ["NPU212"]) == []


def test_npu212_entry_for_another_field_added_still_reports() -> None:
    text = _OPS_212.replace("{later}", '_NPU_DEFAULT_FALLBACK["swiglu_mlp_implementation"] = "eager"')
    assert [d.code for d in lint_snippet("veomni/arguments/arguments_types.py", text, ["NPU212"])] == [
        "NPU212"
    ]
