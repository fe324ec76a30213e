"""NPU442 count-reduced-not-summed."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import nodes_of
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.semantics._shared import first_report
from npu_lint.veomni import losspath

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


class CountReducedNotSummed(Rule):
    code = "NPU442"
    name = "count-reduced-not-summed"
    summary = (
        "A token count is all-reduced over the ranks with a mean, a max or the helper's default (`mean`) instead "
        "of a sum, where its value is used in place (a comprehension, a return, an argument)."
    )
    why = (
        "A per-token loss is divided by the number of loss tokens of every rank: the count must be summed. "
        'VeOmni\'s `all_reduce(data, op="mean")` helper averages by default, so a count reduced without '
        '`op="sum"` is the per-rank average -- the denominator is too small by the world size and every rank\'s '
        "loss and gradient are scaled up by it. Nothing fails. NPU421 follows counts reduced into a local to the "
        "division that reads them; this rule covers the ones reduced where they are used: the returned "
        "per-step denominators of a dict comprehension, an argument. A count is a value named after tokens, "
        "counts, lengths or `num_items` (or an item of a collection so named)."
    )
    bad = (
        Example(
            """
            from ..utils.dist_utils import all_reduce


            def step_denominators(per_rank_token_len):
                return {key: all_reduce(value.item()) for key, value in per_rank_token_len.items()}
            """,
            path="veomni/utils/toy_loss_utils.py",
            title="the helper's default mean",
        ),
    )
    good = (
        Example(
            """
            from ..utils.dist_utils import all_reduce


            def step_denominators(per_rank_token_len):
                return {key: all_reduce(value.item(), op="sum") for key, value in per_rank_token_len.items()}
            """,
            path="veomni/utils/toy_loss_utils.py",
            title="summed over the ranks",
        ),
    )
    fix_safety = "No fix."
    requires = ("all_reduce", ("token", "count", "num_items", "num_valid", "_len", "denom"))
    node_types = _FUNCS

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        helper_mean = self.ctx.memo.get("npu442_helper_mean")
        if helper_mean is None:
            helper_mean = any(
                any(a.name == "all_reduce" for a in n.names) and "torch" not in (n.module or "")
                for n in nodes_of(self.ctx.tree, ast.ImportFrom)
            )
            self.ctx.memo["npu442_helper_mean"] = helper_mean
        for call, count, op in losspath.unsummed_count_values(node, bool(helper_mean)):
            if not first_report(self, call):
                continue
            self.report(
                call,
                f"the token count `{count}` is all-reduced with `{op}`, not summed: a per-token loss divides by "
                'the tokens of every rank, so this denominator is off by the world size (pass `op="sum"`)',
            )
