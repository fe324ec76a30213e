"""NPU440 summed-loss-handed-on."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni import losspath

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


class SummedLossHandedOn(Rule):
    code = "NPU440"
    name = "summed-loss-handed-on"
    summary = (
        "A cross-entropy is handed on as the step's loss (`outputs.loss = ...`) as a token sum, or divided by "
        "every label position instead of the valid ones."
    )
    why = (
        "VeOmni's trainers weight each micro-batch's loss by its share of the step's loss tokens "
        "(`mean_global_loss`: `loss * micro_batch_tokens / step_tokens`), so the loss a post-forward hands on must be "
        'the per-token mean over the valid (non-ignored) labels. A `reduction="sum"` (or `"none"` summed) loss is '
        "weighted by the token count twice, and long micro-batches dominate the gradient quadratically; a sum "
        "divided by `labels.numel()` counts the padding and prompt positions, so the loss shrinks with them. The "
        "check follows the value assigned to `<outputs>.loss` back to its cross-entropy / NLL call."
    )
    bad = (
        Example(
            """
            import torch.nn as nn


            def postforward(outputs, logits, labels):
                loss = nn.functional.cross_entropy(logits, labels.view(-1), ignore_index=-100, reduction="sum")
                outputs.loss = loss
                return outputs
            """,
            path="veomni/trainer/toy_trainer.py",
            title="a token sum handed on as the per-token loss",
        ),
    )
    good = (
        Example(
            """
            import torch.nn as nn


            def postforward(outputs, logits, labels):
                loss = nn.functional.cross_entropy(logits, labels.view(-1), ignore_index=-100, reduction="mean")
                outputs.loss = loss
                return outputs
            """,
            path="veomni/trainer/toy_trainer.py",
            title="the mean over the valid labels",
        ),
    )
    fix_safety = "No fix."
    requires = (("cross_entropy", "nll_loss"), "reduction")
    node_types = _FUNCS

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def _first(self, where: ast.AST) -> bool:
        """Whether ``where`` is reported for the first time (a nested function is walked with its parent too)."""
        seen = self.ctx.memo.setdefault((self.code, "reported"), set())
        assert isinstance(seen, set)
        if id(where) in seen:
            return False
        seen.add(id(where))
        return True

    def visit(self, node: ast.AST) -> None:
        for call, red in losspath.unnormalised_losses(node):
            if not self._first(call):
                continue
            self.report(
                call,
                f'this cross-entropy is taken with `reduction="{red}"` and handed on as the step\'s loss without '
                "a division by its token count: the trainer weights the loss by the micro-batch's tokens again, so "
                "the gradient scales with the square of the token count (use the mean over the valid labels)",
            )
        for div, denom in losspath.numel_denominators(node):
            if not self._first(div.right):
                continue
            self.report(
                div.right,
                f"the summed cross-entropy is divided by `{denom}`, every label position including the ignored "
                "ones: divide by the count of labels that are not the ignore index",
            )
