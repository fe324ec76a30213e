"""Round 10, device family: a CUDA device-type comparison an NPU host never evaluates (an earlier operand of the
same ``and`` / ``or`` already decides the condition there) is not a misrouting of NPU tensors (NPU102)."""

from __future__ import annotations

import textwrap

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source


def _lint(text: str) -> list:
    source = SourceFile.from_text("veomni/optim/toy_muon.py", textwrap.dedent(text).lstrip())
    return lint_source(source, ["NPU102"], Settings())


@pytest.mark.parametrize(
    ("condition", "found"),
    [
        ("not IS_CUDA_AVAILABLE or grad.device.type != 'cuda'", 0),  # decided by the first operand on Ascend
        ("IS_CUDA_AVAILABLE and grad.device.type == 'cuda'", 0),
        ("grad.device.type != 'cuda' or not IS_CUDA_AVAILABLE", 1),  # the comparison runs first
        ("IS_NPU_AVAILABLE or grad.device.type != 'cuda'", 0),
        ("use_fast or grad.device.type != 'cuda'", 1),  # not decided by the host
    ],
)
def test_npu102_comparison_short_circuited_on_npu(condition: str, found: int) -> None:
    text = f"""
    from veomni.utils.device import IS_CUDA_AVAILABLE, IS_NPU_AVAILABLE


    def fast_path_unavailable(grad, use_fast=False):
        if {condition}:
            return "unsupported"
        return None
    """
    assert len(_lint(text)) == found
