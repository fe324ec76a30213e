"""NPU467 rms-statistic-named-axis."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.semantics._shared import first_report
from npu_lint.veomni import norms

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


class RmsStatisticNamedAxis(Rule):
    code = "NPU467"
    name = "rms-statistic-named-axis"
    summary = (
        "A root-mean-square statistic is taken over an axis the function's own shape unpack names as the batch, "
        "the tokens or the layers (`B, T, D, L = x.shape` then `mean(x ** 2, dim=-1)`)."
    )
    why = (
        "An RMSNorm over a tensor with more than three axes (text-encoder features stacked per layer, "
        "`[B, T, D, L]`) cannot reduce over the last axis by habit: the hidden axis is wherever the shape says "
        "it is. When the function unpacks the shape into named axes, those names are the reference: a mean of "
        "squares over `L` normalises each channel by its RMS across layers (and over `T` or `B`, across tokens "
        "or samples), which is not the per-token statistic the checkpoint was trained with, and nothing fails: "
        "the shapes still broadcast. A negative index that lands on the hidden axis (`dim=-2` on `[B, T, D, L]`) "
        "is the same reduction and is not reported."
    )
    bad = (
        Example(
            """
            import torch


            def per_token_rms(encoded_text):
                B, T, D, L = encoded_text.shape
                variance = torch.mean(encoded_text**2, dim=-1, keepdim=True)
                return (encoded_text * torch.rsqrt(variance + 1e-6)).reshape(B, T, D * L)
            """,
            path="veomni/models/diffusers/toy_dit/feature_extractor.py",
        ),
    )
    good = (
        Example(
            """
            import torch


            def per_token_rms(encoded_text):
                B, T, D, L = encoded_text.shape
                variance = encoded_text.square().mean(dim=-2, keepdim=True)
                return (encoded_text * torch.rsqrt(variance + 1e-6)).reshape(B, T, D * L)
            """,
            path="veomni/models/diffusers/toy_dit/feature_extractor.py",
        ),
    )
    fix_safety = "No fix: reduce over the hidden axis the shape names."
    requires = ("shape", "sqrt")
    node_types = _FUNCS

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        for call, axis, hidden in norms.named_axis_faults(node):
            if first_report(self, call):
                self.report(
                    call,
                    f"the mean of squares is taken over `{axis}`, which this function's shape unpack names as "
                    f"another axis than the hidden one (`{hidden}`): not a per-token RMS statistic",
                )
