"""NPU465 query-key-norm-crossed."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.semantics._shared import first_report
from npu_lint.veomni import norms

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


class QueryKeyNormCrossed(Rule):
    code = "NPU465"
    name = "query-key-norm-crossed"
    summary = (
        "A key-side (query-side) norm statement is its sibling with every q/k name swapped but one: the keys "
        "normalised by `self.q_norm`, a key norm's backward handed the query rows' saved `invvar_q`, the query "
        "norm (or its backward) handed the key tensor."
    )
    why = (
        "Attention with QK-norm normalises queries and keys with two norms of their own (`q_norm` and "
        "`k_norm`, two learned weights, two saved reciprocal RMS tensors in a fused backward). The two statements "
        "are written as a pair, the key one by copying the query one, and the query statement is the reference "
        "for the key statement beside it: a name left unswapped (`key_states = self.q_norm(key_states)`, "
        "`npu_rms_norm_backward(dy_k, k, norm_k_weight, invvar_q)`) normalises the keys with the query norm's "
        "weight (the checkpoint's `k_norm` is ignored and gets no gradient) or computes the key gradients of "
        "another function than the forward did. The code runs and the loss still falls."
    )
    bad = (
        Example(
            """
            def qk_norm(self, query_states, key_states):
                query_states = self.q_norm(query_states)
                key_states = self.q_norm(key_states)
                return query_states, key_states
            """,
            path="veomni/models/transformers/toy/modeling_toy.py",
        ),
        Example(
            """
            import torch_npu


            def qk_norm_backward(dy_q, dy_k, q, k, norm_q_weight, norm_k_weight, invvar_q, invvar_k):
                grad_k, grad_norm_k_weight = torch_npu.npu_rms_norm_backward(dy_k, k, norm_k_weight, invvar_k)
                grad_q, grad_norm_q_weight = torch_npu.npu_rms_norm_backward(dy_q, k, norm_q_weight, invvar_q)
                return grad_q, grad_k, grad_norm_q_weight, grad_norm_k_weight
            """,
            path="veomni/distributed/sequence_parallel/async_ulysses.py",
            title="the query norm's backward recomputed from the keys",
        ),
    )
    good = (
        Example(
            """
            def qk_norm(self, query_states, key_states):
                query_states = self.q_norm(query_states)
                key_states = self.k_norm(key_states)
                return query_states, key_states
            """,
            path="veomni/models/transformers/toy/modeling_toy.py",
        ),
    )
    fix_safety = "No fix: use the key-side name."
    requires = ("norm",)
    node_types = _FUNCS

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        for stmt, leftover, expected in norms.query_key_leftovers(node):
            if first_report(self, stmt):
                self.report(
                    stmt,
                    f"`{leftover}` in a statement otherwise on the other side of its q/k sibling statement: the "
                    f"sibling's names swapped give `{expected}` here",
                )
