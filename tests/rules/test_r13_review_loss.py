"""The independent review of the round-13 loss and RMSNorm checks (rev13b): correct code each of NPU463-467
reported, the NPU467 crash on an odd axis, and NPU458's comparison missing edits in ``except``/``finally`` blocks
and commuting concatenations. Each test fails without its mend."""

from __future__ import annotations

import ast

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni.losspath import copy_differences

CODES = ["NPU463", "NPU464", "NPU465", "NPU466", "NPU467"]


def _found(path: str, source: str) -> list[tuple[int, str]]:
    found = lint_source(SourceFile.from_text(path, source), CODES, Settings())
    return sorted((d.line, d.code) for d in found if d.code in CODES or d.code == "internal-error")


MODELING = """\
import torch
from torch import nn


class ToyAttention(nn.Module):
    def forward(self, hidden_states, bsz, q_len):
        query_states = self.q_proj(hidden_states)
        key_states = self.k_proj(hidden_states)
        query_states = self.q_norm(query_states.view(bsz, q_len, -1, self.head_dim))
        key_states = self.k_norm(key_states.view(bsz, q_len, -1, self.head_dim))
        return query_states, key_states


class ToyAttention2(nn.Module):
    def forward(self, q, k, v):
        q = self.q_norm(q).to(q.dtype)
        k = self.k_norm(k).to(q.dtype)
        return q, k


def rms(x, eps=1e-6):
    B, T, D, L = x.shape
    x = x.permute(0, 1, 3, 2)
    variance = x.pow(2).mean(-1, keepdim=True)
    return x * torch.rsqrt(variance + eps)


def rms2(x, eps=1e-6):
    B, T, L, D = x.shape
    x = x.reshape(B, T, D, L)
    variance = x.pow(2).mean(-2, keepdim=True)
    return x * torch.rsqrt(variance + eps)
"""

DIFFUSERS = """\
import torch


def modulate(x, shift, scale):
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


def block(self, x, shift_msa, scale_msa, shift_mlp, scale_mlp):
    h = self.norm1(x) * (1 + scale_msa) + shift_msa
    h2 = self.norm2(h) * (1 + scale_mlp) + shift_mlp
    return h2


def encode_latents(self, latents):
    return latents * self.vae_scale_factor + self.shift_factor
"""

LOSS = """\
def per_token_logprobs(logits, labels, temperature=1.0):
    logits = logits / temperature
    return log_probs_from_logits(logits, labels)


def scaled_logprobs(logits, labels, temperature=1.0):
    return log_probs_from_logits(logits, labels, temperature=temperature)


def ce_eval(logits, labels, ignore_index=-100):
    mask = labels != ignore_index
    loss = cross_entropy_loss(logits[mask], labels[mask])
    return loss


def ce_train(logits, labels, ignore_index=-100):
    return cross_entropy_loss(logits, labels, ignore_index=ignore_index)
"""

KL = """\
import torch


def fkl(teacher_lp, student_lp):
    return (-teacher_lp.exp() * (student_lp - teacher_lp)).sum(-1)


def fkl2(teacher_lp, student_lp):
    return (teacher_lp.exp() * (student_lp - teacher_lp)).sum(-1).neg()


def entropy_backward(logprobs, entropy, grad_out):
    probs = logprobs.exp()
    return grad_out * probs * (-entropy - logprobs)
"""

DISTILL = """\
import torch


def reverse_kl_neg(student_lp, teacher_lp):
    # cross-entropy-like: sum p_s * (log p_t - log p_s) = -KL(s||t), negated later
    student_p = student_lp.exp()
    ratio = (student_p * (teacher_lp - student_lp)).sum(-1)
    return -ratio.mean()


def js_like(student_lp, teacher_lp):
    kl = torch.sum(teacher_lp.exp() * (student_lp - teacher_lp), dim=-1)
    loss = -kl
    return loss
"""


def test_npu465_shared_reads_beside_the_key_statement_are_not_leftovers() -> None:
    """`q_len` in the key's view, `.to(q.dtype)` on the key: reads the two statements share, not the query's norm."""
    assert _found("veomni/models/transformers/toy/modeling_toy.py", MODELING) == []


def test_npu467_axes_renamed_by_a_permute_or_reshape_are_not_the_unpacked_ones() -> None:
    assert _found("veomni/models/transformers/toy/modeling_toy.py", MODELING) == []


def test_npu466_reference_modulations_are_those_of_the_same_class_or_function() -> None:
    """A pipeline's `latents * self.vae_scale_factor + self.shift_factor` is no sibling of a block's modulations."""
    assert _found("veomni/models/diffusers/toy/transformer_toy.py", DIFFUSERS) == []
    lost = DIFFUSERS.replace("self.norm2(h) * (1 + scale_mlp)", "self.norm2(h) * scale_mlp")
    assert _found("veomni/models/diffusers/toy/transformer_toy.py", lost) == [(10, "NPU466")]


def test_npu463_a_value_the_caller_applies_itself_is_not_dropped() -> None:
    assert _found("veomni/ops/kernels/toy/loss.py", LOSS) == []
    dropped = LOSS.replace("    logits = logits / temperature\n", "")
    assert [c for _l, c in _found("veomni/ops/kernels/toy/loss.py", dropped)] == ["NPU463"]


def test_npu464_negations_other_than_a_unary_minus() -> None:
    """`.neg()`, a negated local (`loss = -kl`, `return -ratio.mean()`) and `-x * (...)` negate the term."""
    assert _found("veomni/ops/kernels/toy/kl.py", KL) == []
    assert _found("veomni/ops/kernels/toy/distill.py", DISTILL) == []
    reversed_ = "import torch\n\n\ndef fkl(t, s):\n    return (t.exp() * (s - t)).sum(-1)\n"
    assert _found("veomni/ops/kernels/toy/kl.py", reversed_) == [(5, "NPU464")]


def test_npu467_an_odd_axis_expression_does_not_crash() -> None:
    source = (
        "import torch\n\n\ndef rms(x):\n    B, T, D, L = x.shape\n"
        "    v = x.pow(2).mean(dim=-None)\n    w = x.pow(2).mean(dim=-...)\n    return x * torch.rsqrt(v + w)\n"
    )
    assert _found("veomni/models/transformers/toy/odd.py", source) == []


def _diff(up: str, copy: str) -> list[tuple[str, str]]:
    return [(u, c) for _site, u, c in copy_differences(ast.parse(copy).body, ast.parse(up).body)]


def test_npu458_edits_in_except_and_finally_blocks_are_compared() -> None:
    up = "try:\n    x = f(a)\nexcept ValueError:\n    x = g(a, 1)\nfinally:\n    h(2)\n"
    copy = up.replace("g(a, 1)", "g(a, 0)").replace("h(2)", "h(3)")
    assert len(_diff(up, copy)) == 2
    assert _diff(up, up) == []


def test_npu458_concatenations_do_not_commute() -> None:
    up = "shape = x.size()[:-1] + (h, d)\ny = a + b\n"
    assert len(_diff(up, "shape = (h, d) + x.size()[:-1]\ny = a + b\n")) == 1
    assert _diff(up, "shape = x.size()[:-1] + (h, d)\ny = b + a\n") == []
