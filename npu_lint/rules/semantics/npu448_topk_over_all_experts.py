"""NPU448 topk-over-all-experts."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.semantics._shared import first_report
from npu_lint.veomni import losspath

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


class TopkOverAllExperts(Rule):
    code = "NPU448"
    name = "topk-over-all-experts"
    summary = "A router's top-k takes `k` = the number of experts (`self.num_experts`) instead of the top-k."
    why = (
        "A mixture-of-experts router keeps each token's `top_k` (`num_experts_per_tok`) best experts. With `k` the "
        "number of all experts every token is routed everywhere: the layer is dense, the routing weights are "
        "renormalised over all experts, and the load-balancing loss's routed fraction is constant. It runs (more "
        "slowly) and nothing fails. The check reads the `k` of `topk` calls."
    )
    bad = (
        Example(
            """
            import torch


            def route(self, scores):
                weights, experts = torch.topk(scores, self.num_experts, dim=-1)
                return weights, experts
            """,
            path="veomni/models/transformers/toy_moe/toy_moe_gpu_patch_gen_config.py",
            title="every expert selected",
        ),
    )
    good = (
        Example(
            """
            import torch


            def route(self, scores):
                weights, experts = torch.topk(scores, self.top_k, dim=-1)
                return weights, experts
            """,
            path="veomni/models/transformers/toy_moe/toy_moe_gpu_patch_gen_config.py",
            title="the top-k",
        ),
    )
    fix_safety = "No fix."
    requires = ("topk", "experts")
    node_types = _FUNCS

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        for call in losspath.topk_over_all_experts(node):
            if not first_report(self, call):
                continue
            self.report(
                call,
                f"`{ast.unparse(call)}` selects as many experts as there are: a router keeps its top-k "
                "(`num_experts_per_tok`), not all of them",
            )
