"""NPU462 loss-terms-averaged."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.semantics._shared import first_report
from npu_lint.veomni import losspath

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


class LossTermsAveraged(Rule):
    code = "NPU462"
    name = "loss-terms-averaged"
    summary = (
        "The named terms of a loss mapping are stacked and averaged into the step's loss instead of summed."
    )
    why = (
        "A model with several heads returns a mapping of loss terms (text and image losses, an auxiliary "
        "loss); each term is already normalised and weighted, and the step's objective is their sum. Averaging "
        "them divides every term's gradient by the number of terms, so each head trains at 1/n of its weight "
        "while the logged per-term losses look unchanged, and adding a term silently rescales the others."
    )
    bad = (
        Example(
            """
            import torch


            def postforward(outputs):
                loss_dict = {"text_loss": outputs.text_loss, "image_loss": outputs.image_loss}
                loss = torch.stack(list(loss_dict.values())).mean()
                return loss, loss_dict
            """,
            path="veomni/trainer/base.py",
        ),
    )
    good = (
        Example(
            """
            import torch


            def postforward(outputs):
                loss_dict = {"text_loss": outputs.text_loss, "image_loss": outputs.image_loss}
                loss = torch.stack(list(loss_dict.values())).sum()
                return loss, loss_dict
            """,
            path="veomni/trainer/base.py",
        ),
    )
    fix_safety = "No fix."
    requires = ("loss", "mean")
    node_types = _FUNCS

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        for call, mapping in losspath.averaged_loss_terms(node):
            if not first_report(self, call):
                continue
            self.report(
                call,
                f"the terms of `{mapping}` are averaged into one loss: each term's gradient is divided by their "
                "number (sum them)",
            )
