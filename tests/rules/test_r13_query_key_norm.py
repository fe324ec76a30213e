"""NPU465: the query-side norm statement is the reference for its key-side sibling."""

from __future__ import annotations

import textwrap

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source

PATH = "veomni/distributed/sequence_parallel/toy_async.py"

BACKWARD = """
import torch_npu


def backward(ctx, grad_output, q, k, norm_q_weight, norm_k_weight, invvar_q, invvar_k):
    grad_q, grad_norm_q_weight = torch_npu.npu_rms_norm_backward(
        grad_output[0].contiguous(), q, norm_q_weight, invvar_q
    )
    grad_k, grad_norm_k_weight = torch_npu.npu_rms_norm_backward(
        grad_output[1].contiguous(), k, norm_k_weight, invvar_k
    )
    return grad_q, grad_k, grad_norm_q_weight, grad_norm_k_weight
"""

FORWARD = """
def forward(self, hidden_states, hidden_shape):
    query_states = self.q_norm(self.q_proj(hidden_states).view(hidden_shape)).transpose(1, 2)
    key_states = self.k_norm(self.k_proj(hidden_states).view(hidden_shape)).transpose(1, 2)
    return query_states, key_states
"""


def _lines(text: str) -> list[int]:
    src = SourceFile.from_text(PATH, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, ["NPU465"], Settings()) if d.code == "NPU465")


def test_paired_statements_are_quiet() -> None:
    assert _lines(BACKWARD) == []
    assert _lines(FORWARD) == []


@pytest.mark.parametrize(
    ("text", "old", "new", "line"),
    [
        (BACKWARD, "norm_k_weight, invvar_k", "norm_k_weight, invvar_q", 8),
        (BACKWARD, "q, norm_q_weight, invvar_q", "q, norm_k_weight, invvar_q", 5),
        (FORWARD, "key_states = self.k_norm(self.k_proj", "key_states = self.q_norm(self.k_proj", 3),
    ],
)
def test_one_name_left_unswapped_is_reported(text: str, old: str, new: str, line: int) -> None:
    edited = text.replace(old, new)
    assert edited != text
    assert _lines(edited) == [line]


def test_statements_that_use_both_sides_on_purpose_are_quiet() -> None:
    """A joint q/k norm call and a statement with no sibling are not judged."""
    text = """
    def forward(self, query_states, key_states):
        query_states, key_states = self.qk_norm(query_states, key_states)
        scores = self.score_norm(query_states @ key_states.transpose(-1, -2))
        return scores
    """
    assert _lines(text) == []
