"""NPU447 loss-token-count."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.semantics._shared import first_report
from npu_lint.veomni import losspath

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


class LossTokenCount(Rule):
    code = "NPU447"
    name = "loss-token-count"
    summary = (
        "A loss-token count is taken from the labels without excluding the ignored positions "
        "(`labels.numel()`, `len(labels)`, a shape, `labels == IGNORE_INDEX`)."
    )
    why = (
        "The global mean loss weights each micro-batch by its share of the step's *supervised* tokens -- the "
        "labels that are not `IGNORE_INDEX` -- as transformers' `num_items_in_batch` does. A count of every "
        "position makes the weight follow the padded length and the prompt length instead, and a count of the "
        "ignored positions inverts it; the loss still decreases. The check looks at assignments to a count named "
        "for tokens (`*_tokens`, `num_items*`, `num_valid*`) whose value reads the labels."
    )
    bad = (
        Example(
            """
            def count_tokens(batch):
                counts = {}
                counts["text_tokens"] = batch["labels"].numel()
                return counts
            """,
            path="veomni/utils/toy_loss_utils.py",
            title="every label position counted",
        ),
    )
    good = (
        Example(
            """
            IGNORE_INDEX = -100


            def count_tokens(batch):
                counts = {}
                counts["text_tokens"] = (batch["labels"] != IGNORE_INDEX).sum()
                return counts
            """,
            path="veomni/utils/toy_loss_utils.py",
            title="the supervised labels",
        ),
    )
    fix_safety = "No fix."
    requires = ("label", ("token", "num_items", "num_valid"))
    node_types = _FUNCS

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test and not ctx.source.kind.generated

    def visit(self, node: ast.AST) -> None:
        for where, why in losspath.token_count_faults(node):
            if first_report(self, where):
                self.report(
                    where,
                    f"{why}: the loss is weighted by this count, so count `labels != IGNORE_INDEX` instead",
                )
