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


# -- NPU410: a norm statistic used the wrong way round, in any function of the tree (not only RMSNorm classes) --

_L2NORM = """
import torch


def l2norm(x: torch.FloatTensor, dim: int = -1, eps: float = 1e-6):
    original_dtype = x.dtype
    inv_norm = torch.rsqrt((x * x).sum(dim=dim, keepdim=True) + eps)
    return (x {op} inv_norm).to(original_dtype)
"""

_QKNORM = """
import torch
from torch import nn


class QKNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.scale = nn.Parameter(torch.ones(dim))

    def forward(self, q):
        q32 = q.float()
        rrms = torch.rsqrt(torch.mean(q32**2, dim=-1, keepdim=True) + self.eps)
        return (q32 {op} rrms).to(q.dtype) * self.scale
"""

_PIXEL = """
import torch


def pixel_norm(z, eps=1e-8):
    norm = z.square().mean(dim=1, keepdim=True).add(eps).sqrt()
    return z {op} norm
"""

_NOT_A_NORM = """
import torch


def rescale_noise_cfg(noise_cfg, noise_pred_text, guidance_rescale=0.0):
    std_text = torch.sqrt(noise_pred_text.pow(2).mean(dim=-1, keepdim=True) + 1e-6)
    rescaled = noise_cfg * std_text
    return guidance_rescale * rescaled + (1 - guidance_rescale) * noise_cfg
"""


def test_npu410_reads_every_function_taking_a_root_of_its_own_squares() -> None:
    cases = [
        ("veomni/ops/kernels/gated_delta_rule/_ascend/flash_gated_delta_rule.py", _L2NORM, "*", "/"),
        ("veomni/models/diffusers/flux/modeling_flux.py", _QKNORM, "*", "/"),
        ("veomni/models/seed_omni/decoder/movqgan/modeling_movqgan.py", _PIXEL, "/", "*"),
    ]
    for path, text, good, bad in cases:
        assert _codes(path, text.replace("{op}", good), ["NPU410"]) == [], path
        found = _codes(path, text.replace("{op}", bad), ["NPU410"])
        line = next(
            i for i, s in enumerate(textwrap.dedent(text).lstrip("\n").splitlines(), 1) if "{op}" in s
        )
        assert found == [("NPU410", line)], (path, found)
    # another tensor's RMS scaling this one (noise rescaling) is not a norm used backwards
    assert _codes("veomni/models/diffusers/wan/pipeline.py", _NOT_A_NORM, ["NPU410"]) == []
