"""NPU226: an NPU hardware requirement satisfied by importing `torch_npu` alone (hist24, VeOmni e9af5a11).

A wheel-only probe passes on CPU and GPU images that ship `torch_npu` without an Ascend device, so the registry
selects NPU rows there. The device branch must probe the device (`IS_NPU_AVAILABLE`, `torch.npu.is_available()`).
"""

from __future__ import annotations

from tests.rules.snippets import lint_snippet

PATH = "veomni/ops/kernel_registry.py"

REQUIREMENT = """
from dataclasses import dataclass

from veomni.utils.device import IS_CUDA_AVAILABLE, IS_NPU_AVAILABLE


@dataclass(frozen=True)
class HardwareRequirement:
    device_type: str

    def is_satisfied(self) -> bool:
        if self.device_type == "gpu":
            return IS_CUDA_AVAILABLE
        if self.device_type == "{device}":
{body}
        return True
"""

WHEEL_ONLY = """\
            try:
                import torch_npu  # noqa: F401

                return True
            except ImportError:
                return False"""

WHEEL_AND_DEVICE = """\
            try:
                import torch_npu  # noqa: F401

                return torch_npu.npu.is_available() and IS_NPU_AVAILABLE
            except ImportError:
                return False"""


def _lines(body: str, device: str = "npu") -> list[int]:
    return [d.line for d in lint_snippet(PATH, REQUIREMENT.format(device=device, body=body), ["NPU226"])]


def test_a_wheel_only_npu_requirement_is_reported() -> None:
    assert _lines(WHEEL_ONLY) == [15]  # the import


def test_a_device_probe_in_the_branch_is_quiet() -> None:
    assert _lines("            return IS_NPU_AVAILABLE") == []
    assert _lines(WHEEL_AND_DEVICE) == []
    assert _lines("            if not IS_NPU_AVAILABLE:\n                return False\n" + WHEEL_ONLY) == []


def test_another_device_branch_is_not_judged_by_the_npu_wheel() -> None:
    assert _lines(WHEEL_ONLY, device="mlu") == []
