"""Round 14 (semantics, multimodal, device): checks widened to whole code regions, each shown on variants in
other files and models of the region than the dev case that prompted it."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source


def _codes(path: str, text: str, codes: list[str]) -> list[tuple[str, int]]:
    src = SourceFile.from_text(path, textwrap.dedent(text).lstrip("\n"))
    return sorted((d.code, d.line) for d in lint_source(src, codes, Settings()) if d.code in codes)


# -- NPU458: an unpatched copy spelled with Tensor methods instead of torch functions is the same computation --

_GEN_BANNER = """
# ==============================================================================
#  AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
# ==============================================================================
#
#  Source: transformers.models.qwen3.modeling_qwen3
#  Based on: transformers==5.9.0
#
#  Patches applied:
#    - method_override: Qwen3ForCausalLM.forward
#      loss
#
# ==============================================================================

import torch
from torch import nn


class Qwen3RMSNorm(nn.Module):
    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
{body}
        return self.weight * hidden_states.to(input_dtype)
"""
_GEN_PATH = "veomni/models/transformers/qwen3/generated/patched_modeling_qwen3_gpu.py"


def _gen(body: str) -> list[tuple[str, int]]:
    return _codes(
        _GEN_PATH, _GEN_BANNER.replace("{body}", textwrap.indent(textwrap.dedent(body), " " * 8)), ["NPU458"]
    )


def test_npu458_tensor_method_spellings_are_upstream_code() -> None:
    assert (
        _gen(
            """
        variance = hidden_states.square().mean(dim=-1, keepdim=True)
        hidden_states = hidden_states * (variance + self.variance_epsilon).rsqrt()
        """
        )
        == []
    )
    assert (
        _gen(
            """
        variance = torch.square(hidden_states).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        """
        )
        == []
    )
    # the same method spelling with another computation is still an edit
    assert (
        _gen(
            """
        variance = hidden_states.square().mean(dim=-1, keepdim=True)
        hidden_states = hidden_states * (variance + self.variance_epsilon).sqrt()
        """
        )
        != []
    )
