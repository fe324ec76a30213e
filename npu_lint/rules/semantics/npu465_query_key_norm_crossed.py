"""NPU465 query-key-norm-crossed."""

from __future__ import annotations

import ast

from npu_lint.core.memo import by_content
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.semantics._shared import first_report
from npu_lint.veomni import norms
from npu_lint.veomni.npucalls import kernel_of, torch_npu_names

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


_EPS_ATTRS = frozenset({"eps", "epsilon", "variance_epsilon"})


def _eps_only(stmt: ast.stmt, leftover: str) -> bool:
    """Every read of ``leftover`` in ``stmt`` is the owner of an epsilon attribute (``self.q_norm.eps``): the
    norm's constant, not its weight, its state or its input."""
    owners = [n for n in ast.walk(stmt) if isinstance(n, ast.Attribute) and n.attr in _EPS_ATTRS]
    eps_reads = {id(n.value) for n in owners}
    reads = [
        n
        for n in ast.walk(stmt)
        if (isinstance(n, ast.Name) and n.id == leftover)
        or (isinstance(n, ast.Attribute) and n.attr == leftover)
    ]
    return bool(reads) and all(id(n) in eps_reads for n in reads)


class QueryKeyNormCrossed(Rule):
    code = "NPU465"
    name = "query-key-norm-crossed"
    summary = (
        "A key-side (query-side) norm statement is its sibling with every q/k name swapped but one: the keys "
        "normalised by `self.q_norm`, a key norm's backward handed the query rows' saved `invvar_q`, the query "
        "norm handed the key tensor (an Ascend norm kernel handed it is NPU315's)."
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
            def qk_norm(self, query_states, key_states):
                key_states = self.k_norm(key_states)
                query_states = self.q_norm(key_states)
                return query_states, key_states
            """,
            path="veomni/models/transformers/toy/modeling_toy.py",
            title="the query norm handed the keys",
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
        imported: frozenset[str] | None = None
        # a function of the function's subtree alone: shared with its verbatim copies (core.memo.by_content)
        for stmt, leftover, expected, operand in by_content(
            norms.query_key_leftovers, node, self.ctx.source.lines
        ):
            if operand:
                if imported is None:
                    imported = self.ctx.memo.get("npucalls.imported")
                    if imported is None:
                        imported = self.ctx.memo["npucalls.imported"] = torch_npu_names(self.ctx.tree)
                if any(kernel_of(c, imported) for c in ast.walk(stmt) if isinstance(c, ast.Call)):
                    continue  # an Ascend kernel's twin call fed the other side's tensor: NPU315's
            if _eps_only(stmt, leftover):
                continue  # the other side's norm read only for its epsilon (one config value for both norms)
            if first_report(self, stmt):
                self.report(
                    stmt,
                    f"`{leftover}` in a statement otherwise on the other side of its q/k sibling statement: the "
                    f"sibling's names swapped give `{expected}` here",
                )
