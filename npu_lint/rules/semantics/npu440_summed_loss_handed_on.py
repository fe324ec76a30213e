"""NPU440 summed-loss-handed-on."""

from __future__ import annotations

import ast
from itertools import chain

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.semantics._shared import first_report
from npu_lint.veomni import losspath

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


class SummedLossHandedOn(Rule):
    code = "NPU440"
    name = "summed-loss-handed-on"
    summary = (
        "A cross-entropy is handed on as the step's loss (`outputs.loss = ...`) as a token sum, or divided by "
        "every label position instead of the valid ones; or a per-element loss (an unreduced loss, a squared "
        "error, a preference loss's per-pair vector) is summed into the loss and never divided by a count."
    )
    why = (
        "VeOmni's trainers weight each micro-batch's loss by its share of the step's loss tokens "
        "(`mean_global_loss`: `loss * micro_batch_tokens / step_tokens`), so the loss a post-forward hands on must be "
        'the per-token mean over the valid (non-ignored) labels. A `reduction="sum"` (or `"none"` summed) loss is '
        "weighted by the token count twice, and long micro-batches dominate the gradient quadratically; a sum "
        "divided by `labels.numel()` counts the padding and prompt positions, so the loss shrinks with them. The "
        "check follows the value assigned to `<outputs>.loss` back to its cross-entropy / NLL call. The same holds "
        "for any loss built from per-element values (a diffusion model's squared error per latent, a DPO loss per "
        "pair): upstream hands on their mean (`.mean()`, or a sum divided by a count), so a `.sum()` over the "
        "elements that nothing divides afterwards (through locals, lists and helpers given a count) makes the loss "
        "and its gradient grow with the clip size or the number of pairs (`losspath.summed_losses`)."
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
        Example(
            """
            import torch.nn.functional as F


            def flow_loss(prediction, target):
                per_sample_loss = F.mse_loss(prediction, target, reduction="none")
                per_sample_loss = per_sample_loss.view(per_sample_loss.shape[0], -1).sum(dim=1)
                return per_sample_loss.mean()
            """,
            path="veomni/models/diffusers/toy/modeling_toy.py",
            title="a squared error summed over each sample's latents",
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
        Example(
            """
            import torch.nn.functional as F


            def flow_loss(prediction, target):
                per_sample_loss = F.mse_loss(prediction, target, reduction="none")
                per_sample_loss = per_sample_loss.view(per_sample_loss.shape[0], -1).mean(dim=1)
                return per_sample_loss.mean()
            """,
            path="veomni/models/diffusers/toy/modeling_toy.py",
            title="the mean over each sample's latents",
        ),
    )
    fix_safety = "No fix."
    requires = (("cross_entropy", "nll_loss", "loss", "Loss"), ("reduction", ".sum(", "torch.sum("))
    node_types = _FUNCS

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def finish(self) -> None:
        if "num_items_in_batch" not in self.ctx.source.text:
            return
        for call, name, red in losspath.summed_loss_objects(self.ctx.tree):
            if not first_report(self, red):
                continue
            self.report(
                red,
                f'`{name}` is built with `reduction="sum"` and a function returns its result (`{ast.unparse(call.func)}(...)`) as the loss '
                "without a division by `num_items_in_batch`: this row hands on a token sum where the loss contract "
                "(and the other rows of the op) hand on the per-token mean",
            )

    def visit(self, node: ast.AST) -> None:
        found = chain(
            ((call, _unnormalised(red)) for call, red in losspath.unnormalised_losses(node)),
            ((div.right, _over_numel(denom)) for div, denom in losspath.numel_denominators(node)),
            ((call, _unaveraged(summed, loss)) for call, summed, loss in losspath.summed_losses(node)),
        )
        for where, message in found:
            if first_report(self, where):
                self.report(where, message)


def _unnormalised(red: str) -> str:
    return (
        f'this cross-entropy is taken with `reduction="{red}"` and handed on as the step\'s loss without '
        "a division by its token count: the trainer weights the loss by the micro-batch's tokens again, so "
        "the gradient scales with the square of the token count (use the mean over the valid labels)"
    )


def _over_numel(denom: str) -> str:
    return (
        f"the summed cross-entropy is divided by `{denom}`, every label position including the ignored "
        "ones: divide by the count of labels that are not the ignore index"
    )


def _unaveraged(summed: str, loss: str) -> str:
    what = f"`{summed}`" if summed == loss else f"`{summed}` into `{loss}`"
    return (
        f"this sums the per-element loss {what} and nothing divides it by a count afterwards: the loss "
        "grows with the number of elements (tokens, latent positions, pairs) where upstream hands on their "
        "mean; use `.mean()` or divide the sum by the count"
    )
