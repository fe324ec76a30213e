"""NPU449 aux-loss-top-k-defaulted."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni import losspath


class AuxLossTopKDefaulted(Rule):
    code = "NPU449"
    name = "aux-loss-top-k-defaulted"
    summary = (
        "A load-balancing loss is called with the number of experts but without the model's top-k, so the "
        "function's default `top_k` stands in for `num_experts_per_tok`."
    )
    why = (
        "The load-balancing loss counts, per expert, the fraction of tokens routed to it among each token's "
        "`top_k` choices. `load_balancing_loss_func(gate_logits, num_experts, top_k=2, attention_mask=None)` "
        "defaults `top_k` to 2; a call that drops `self.num_experts_per_tok` (a keyword rewrite that forgot it, "
        "or an argument removed with the mask moved to a keyword) computes the loss for two experts per token on "
        "a model that routes to eight: the routed fraction and the loss's scale are wrong and the router is "
        "balanced towards the wrong target. The check reads calls whose callee names `load_balancing` and that "
        "pass the expert count."
    )
    bad = (
        Example(
            """
            def aux(self, outputs, attention_mask):
                return load_balancing_loss_func(outputs.router_logits, self.num_experts, attention_mask=attention_mask)
            """,
            title="top_k left to the default",
        ),
    )
    good = (
        Example(
            """
            def aux(self, outputs, attention_mask):
                return load_balancing_loss_func(
                    outputs.router_logits, self.num_experts, self.num_experts_per_tok, attention_mask
                )
            """,
            title="the model's top-k passed",
        ),
    )
    fix_safety = "No fix."
    requires = ("load_balancing", "experts")
    node_types = (ast.Call,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Call)
        if losspath.aux_loss_top_k_missing(node):
            self.report(
                node,
                "the load-balancing loss gets the number of experts but no top-k: the function's default `top_k` "
                "is used instead of the model's `num_experts_per_tok`",
            )
