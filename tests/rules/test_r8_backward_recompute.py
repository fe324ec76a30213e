"""NPU434: a custom autograd function's backward recomputes a forward value without a setting the forward used
and saved on ctx; variants another engineer would write (other names, a guarded step, a keyword-only setting,
an alias of the ctx setting), with the line it must be reported at and correct variants that stay quiet."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source

PATH = "veomni/ops/kernels/cross_entropy/toy_kernel.py"


def _lines(text: str) -> list[int]:
    src = SourceFile.from_text(PATH, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, ["NPU434"], Settings()) if d.code == "NPU434")


CODE = """
import torch


class Distill(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, w, tgt, teacher, *, tau=1.0, ignore=-100, scale=None):
        scores = torch.matmul(h, w.T)
        scores = scores / tau
        if scale is not None:
            scores = scores * scale
        valid = tgt != ignore
        ctx.save_for_backward(h, w, tgt, teacher)
        ctx.tau, ctx.ignore, ctx.scale = tau, ignore, scale
        return (torch.where(valid, scores.log_softmax(-1).mul(teacher).sum(-1), 0.0)).sum()

    @staticmethod
    def backward(ctx, g):
        h, w, tgt, teacher = ctx.saved_tensors
        tau = ctx.tau
        scores = torch.matmul(h, w.T) / tau
        valid = torch.ones_like(tgt, dtype=torch.bool)
        d = g * valid[:, None] * (scores.softmax(-1) - teacher)
        return d @ w, None, None, None
"""


def test_backward_recompute_variants() -> None:
    # `scores` misses `ctx.scale` (a guarded step); `valid` misses `ctx.ignore`; tau is read through an alias
    assert _lines(CODE) == [20, 21]


def test_backward_recompute_quiet_variants() -> None:
    fixed = CODE.replace(
        "scores = torch.matmul(h, w.T) / tau",
        "scores = torch.matmul(h, w.T) / tau\n        if ctx.scale is not None:\n            scores = scores * ctx.scale",
    ).replace("valid = torch.ones_like(tgt, dtype=torch.bool)", "valid = tgt != ctx.ignore")
    assert _lines(fixed) == []
    restored = CODE.replace("scores = torch.matmul(h, w.T) / tau", "scores = ctx.scores_saved").replace(
        "valid = torch.ones_like(tgt, dtype=torch.bool)", "valid = g.new_ones(g.shape, dtype=torch.bool)"
    )
    assert _lines(restored) == []  # restored from ctx / built from other inputs: not a recomputation
