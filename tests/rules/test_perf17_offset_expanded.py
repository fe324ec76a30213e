"""NPU458 and Gemma3's RMSNorm: ``output * (1.0 + self.weight.float())`` written as the sum
``output + output * self.weight.float()`` computes the same offset (round 16's dev control
``rmsnorm-b16-ctrl-gemma3-op-gen-offset-expanded``), patched or not; dropping the offset is still reported."""

from __future__ import annotations

import textwrap

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source

PATH = "veomni/models/transformers/gemma3/generated/patched_modeling_gemma3_gpu.py"
BANNER = """
# ==============================================================================
#  AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
# ==============================================================================
#
#  Source: transformers.models.gemma3.modeling_gemma3
#  Based on: transformers==5.9.0
#
#  Patches applied:
#    - method_override: {patched}
#
# ==============================================================================

import torch
from torch import nn
"""

NORM = """

class Gemma3RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float())
        output = output * (1.0 + self.weight.float())
        return output.type_as(x)
"""
UPSTREAM = "        output = output * (1.0 + self.weight.float())\n"


def _lines(body: str, patched: str = "Gemma3Model.forward") -> list[int]:
    text = textwrap.dedent(BANNER.format(patched=patched)).lstrip("\n") + textwrap.dedent(body)
    src = SourceFile.from_text(PATH, text)
    return sorted(d.line for d in lint_source(src, ["NPU458"], Settings()) if d.code == "NPU458")


@pytest.mark.parametrize("patched", ["Gemma3Model.forward", "Gemma3RMSNorm.forward"])
@pytest.mark.parametrize(
    "expanded",
    [
        "output = output + output * self.weight.float()",
        "output = output * self.weight.float() + output",
        "output = self.weight.float() * output + output",
    ],
)
def test_the_offset_expanded_into_a_sum_is_quiet(expanded: str, patched: str) -> None:
    assert _lines(NORM, patched) == []
    assert _lines(NORM.replace(UPSTREAM, f"        {expanded}\n"), patched) == []


@pytest.mark.parametrize(
    "edited",
    [
        "output = output * self.weight.float()",  # the offset dropped
        "output = output + output * self.weight",  # expanded, the weight no longer upcast
        "output = output + self.weight.float()",  # not the offset
    ],
)
def test_an_offset_changed_is_still_reported(edited: str) -> None:
    assert _lines(NORM.replace(UPSTREAM, f"        {edited}\n")) != []
