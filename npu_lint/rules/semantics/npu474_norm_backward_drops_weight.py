"""NPU474 norm-backward-drops-weight."""

from __future__ import annotations

import ast
import re

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.backward import is_autograd_function, unused_saved

_WEIGHT = re.compile(r"(?:^|_)(?:weight|gamma|scale|w)(?:_|$)", re.I)
# a scale that is no norm weight: a quantisation scale (straight-through in the backward) or an output's
_NOT_WEIGHT = re.compile(r"(?:^|_)(?:fp8|int8|quant|amax|inv|descale|out|output)(?:_|$)", re.I)


class NormBackwardDropsWeight(Rule):
    code = "NPU474"
    name = "norm-backward-drops-weight"
    summary = (
        "A norm's custom autograd backward (an RMSNorm / LayerNorm `torch.autograd.Function`) unpacks the saved "
        "weight and never uses its values for the gradients it returns (only its dtype or shape, or a cast of it "
        "left unread)."
    )
    why = (
        "A weighted norm's forward is `y = w * x_hat`: the input gradient is `inv_rms * (g*w - x_hat * "
        "mean(g*w*x_hat))`, so the weight enters it through every term. A hand-written backward that saves the "
        "weight and then computes the input gradient from the incoming gradient alone (`d = grad_out` for `d = "
        "grad_out * weight`) trains every layer below each norm with wrong gradients while the forward, and "
        "every loss curve's first steps, look right. The backward is followed from the values it returns back "
        "through its assignments, in-place calls and kernel launches; a saved weight (`weight`, `gamma`, "
        "`scale`, `w`) that none of them reads for its values (a read of `weight.dtype` or a cast bound and "
        "never read does not count) is reported, in any region (ops/kernels, a model file, a spec)."
        " Reported where the weight's value was dropped: the last statement computing from it a value the gradients never use (`w32 = weight.float()` left unused), else its unpacking."
    )
    bad = (
        Example(
            """
            import torch


            class ToyRMSNormFunction(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x, weight, eps):
                    rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
                    ctx.save_for_backward(x, weight, rstd)
                    return (x.float() * rstd * weight.float()).to(x.dtype)

                @staticmethod
                def backward(ctx, grad_out):
                    x, weight, rstd = ctx.saved_tensors
                    x_hat = x.float() * rstd
                    g = grad_out.float()
                    w32 = weight.float()
                    grad_w = (g * x_hat).sum(0).to(weight.dtype)
                    grad_x = rstd * (g - x_hat * (g * x_hat).mean(-1, keepdim=True))
                    return grad_x.to(x.dtype), grad_w, None
            """,
            path="veomni/ops/kernels/rms_norm/toy_rms.py",
            title="the input gradient computed without the weight",
        ),
    )
    good = (
        Example(
            """
            import torch


            class ToyRMSNormFunction(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x, weight, eps):
                    rstd = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
                    ctx.save_for_backward(x, weight, rstd)
                    return (x.float() * rstd * weight.float()).to(x.dtype)

                @staticmethod
                def backward(ctx, grad_out):
                    x, weight, rstd = ctx.saved_tensors
                    x_hat = x.float() * rstd
                    g = grad_out.float() * weight.float()
                    grad_w = (grad_out.float() * x_hat).sum(0).to(weight.dtype)
                    grad_x = rstd * (g - x_hat * (g * x_hat).mean(-1, keepdim=True))
                    return grad_x.to(x.dtype), grad_w, None
            """,
            path="veomni/ops/kernels/rms_norm/toy_rms.py",
        ),
    )
    fix_safety = "No fix: the input gradient's formula is the author's to restore."
    requires = ("saved_tensors", ("norm", "Norm", "NORM"))
    node_types = (ast.ClassDef,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.ClassDef)
        if not is_autograd_function(node):
            return
        if "norm" not in node.name.lower() and "norm" not in self.ctx.source.path.lower():
            return
        for name, where in unused_saved(node):
            if not _WEIGHT.search(name.id) or _NOT_WEIGHT.search(name.id):
                continue
            self.report(
                where,
                f"`{node.name}.backward` unpacks the saved `{name.id}` and never uses its values for the gradients "
                "it returns: the forward scales the normalised input by it, so the input gradient must too "
                f"(`grad * {name.id}`); every layer below this norm gets a wrong gradient",
            )
