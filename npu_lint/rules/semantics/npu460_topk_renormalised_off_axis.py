"""NPU460 topk-renormalised-off-axis."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.semantics._shared import first_report
from npu_lint.veomni import losspath

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


class TopkRenormalisedOffAxis(Rule):
    code = "NPU460"
    name = "topk-renormalised-off-axis"
    summary = (
        "Top-k routing weights are divided by their sum over another axis than the one top-k selected along "
        "(over the tokens, or over every element, instead of each token's k experts)."
    )
    why = (
        "A MoE router with `norm_topk_prob` renormalises each token's k selected weights to sum to one: "
        "`w /= w.sum(dim=-1, keepdim=True)` over the axis `torch.topk(..., dim=-1)` selected along. A sum over "
        "the tokens (`dim=0`) or over every element scales each expert output by about one over the number of "
        "tokens, makes the routing depend on the micro-batch size and the sequence-parallel shard, and no "
        "longer matches the checkpoint's routing, on every device. The values are followed from the top-k call "
        "to the division in one function."
    )
    bad = (
        Example(
            """
            import torch


            def route(router_probs, top_k):
                top_value, top_index = torch.topk(router_probs, top_k, dim=-1)
                top_value /= top_value.sum(dim=0, keepdim=True)
                return top_value, top_index
            """,
            path="veomni/models/transformers/qwen3_moe/qwen3_moe_gpu_patch_gen_config.py",
            title="renormalised over the tokens",
        ),
    )
    good = (
        Example(
            """
            import torch


            def route(router_probs, top_k):
                top_value, top_index = torch.topk(router_probs, top_k, dim=-1)
                top_value = top_value / top_value.sum(-1, keepdim=True)
                return top_value, top_index
            """,
            path="veomni/models/transformers/qwen3_moe/qwen3_moe_gpu_patch_gen_config.py",
        ),
    )
    fix_safety = "No fix: sum over the top-k axis (`dim=-1`)."
    requires = ("topk",)
    node_types = _FUNCS

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        for site, name, picked, axis in losspath.topk_renorm_axis_faults(node):
            if not first_report(self, site):
                continue
            over = "every element" if axis == "all" else f"axis {axis}"
            self.report(
                site,
                f"`{name}` holds top-k values selected along axis {picked} but is renormalised over {over}: each "
                "token's k weights no longer sum to one (sum over the top-k axis)",
            )
