"""Round 12: a generated module's copy of upstream code keeps upstream's numerics (NPU458,
``losspath.copy_numeric_faults``). The copies are variants of transformers 5.9.0's Qwen3-MoE classes (the
installed version the banner names); each edit must be reported at its line, equivalent spellings stay quiet."""

from __future__ import annotations

import textwrap

import pytest

from npu_lint.core.astutil import transformers_version
from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source


def test_the_installed_transformers_is_the_one_the_banners_name() -> None:
    """NPU458 compares with the installed transformers only when it is the banner's version: these tests need
    the pinned 5.9.0 (`make test` installs it); a mismatch fails here, naming it, instead of skipping."""
    assert transformers_version() == "5.9.0", f"transformers {transformers_version()} installed, 5.9.0 needed"


PATH = "veomni/models/transformers/qwen3_moe/generated/patched_modeling_qwen3_moe_npu.py"
BANNER = """
# ==============================================================================
#  AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
# ==============================================================================
#
#  Source: transformers.models.qwen3_moe.modeling_qwen3_moe
#  Based on: transformers==5.9.0
#
#  Patches applied:
#    - method_override: Qwen3MoeRMSNorm.forward
#      OpSlot guard
#
# ==============================================================================

import torch
from torch import nn
"""

NORM = """

class Qwen3MoeRMSNorm(nn.Module):
    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if veomni_rms_norm.use_non_eager_impl:
            return veomni_rms_norm(hidden_states, self.weight, self.variance_epsilon)
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)
"""

ROUTER = """

class Qwen3MoeTopKRouter(nn.Module):
    def forward(self, hidden_states):
        hidden_states = hidden_states.reshape(-1, self.hidden_dim)
        router_logits = F.linear(hidden_states, self.weight)  # (seq_len, num_experts)
        router_probs = torch.nn.functional.softmax(router_logits, dtype=torch.float, dim=-1)
        router_top_value, router_indices = torch.topk(router_probs, self.top_k, dim=-1)  # (seq_len, top_k)
        if self.norm_topk_prob:
            router_top_value /= router_top_value.sum(dim=-1, keepdim=True)
        router_top_value = router_top_value.to(router_logits.dtype)
        router_scores = router_top_value
        return router_logits, router_scores, router_indices
"""


def _lines(body: str) -> list[int]:
    text = textwrap.dedent(BANNER).lstrip("\n") + textwrap.dedent(body)
    src = SourceFile.from_text(PATH, text)
    return sorted(d.line for d in lint_source(src, ["NPU458"], Settings()) if d.code == "NPU458")


def _line_of(body: str, needle: str) -> int:
    text = textwrap.dedent(BANNER).lstrip("\n") + textwrap.dedent(body)
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_faithful_copies_are_quiet() -> None:
    assert _lines(NORM) == []
    assert _lines(ROUTER) == []
    # equivalent spellings: square() for pow(2), a keyword axis, an out-of-place division
    same = NORM.replace(".pow(2).mean(-1, keepdim=True)", ".square().mean(dim=-1, keepdim=True)")
    assert _lines(same) == []
    same = ROUTER.replace(
        "router_top_value /= router_top_value.sum(dim=-1, keepdim=True)",
        "router_top_value = router_top_value / router_top_value.sum(-1, keepdim=True)",
    )
    assert _lines(same) == []


@pytest.mark.parametrize(
    ("old", "new", "needle"),
    [
        ("        hidden_states = hidden_states.to(torch.float32)\n", "", "variance = hidden_states"),
        ("variance + self.variance_epsilon", "variance.clamp(min=self.variance_epsilon)", "clamp"),
        ("variance + self.variance_epsilon", "variance + 1e-6", "1e-6"),
        (
            "self.weight, self.variance_epsilon)",
            "1.0 + self.weight, self.variance_epsilon)",
            "1.0 + self.weight",
        ),
    ],
)
def test_norm_edits_are_reported(old: str, new: str, needle: str) -> None:
    edited = NORM.replace(old, new)
    assert edited != NORM
    assert _lines(edited) == [_line_of(edited, needle)]


@pytest.mark.parametrize(
    ("old", "new", "needle"),
    [
        ("if self.norm_topk_prob:", "if not self.norm_topk_prob:", "if not"),
        ("router_top_value.sum(dim=-1, keepdim=True)", "router_top_value.sum(dim=0, keepdim=True)", "dim=0"),
        ("        router_top_value = router_top_value.to(router_logits.dtype)\n", "", "router_scores ="),
    ],
)
def test_router_edits_are_reported(old: str, new: str, needle: str) -> None:
    edited = ROUTER.replace(old, new)
    assert edited != ROUTER
    assert _lines(edited) == [_line_of(edited, needle)]
