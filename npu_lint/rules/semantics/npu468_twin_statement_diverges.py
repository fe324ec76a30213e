"""NPU468 twin-statement-diverges."""

from __future__ import annotations

import ast

from npu_lint.core.memo import by_content
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.semantics._shared import first_report
from npu_lint.veomni import refedits

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


class TwinStatementDiverges(Rule):
    code = "NPU468"
    name = "twin-statement-diverges"
    summary = (
        "Of two assignments side by side to the two names of a pair (`q_embed`/`k_embed`, `cos`/`sin`, "
        "`gate`/`up`, `chosen`/`rejected`), one is the other with the side swapped and one more change: a name of "
        "the other side read, an fp32 upcast dropped, an operator or a comparison changed."
    )
    why = (
        "Model code computes the two sides of a symmetric pair with two statements written as one: the rotary "
        "embedding of the queries and of the keys, the cosine and the sine table, a gated MLP's two projections, "
        "a preference pair's two answers. The second is written by copying the first and swapping the side, and "
        "each is the other's reference. When the keys' statement still reads the queries "
        "(`k_embed = rot(q.float(), cos, sin)`), reads `sin` where its sibling reads `cos`, drops the `.float()` "
        "its sibling keeps or subtracts where its sibling adds, one side is computed from the wrong tensor or in "
        "bf16, and nothing fails: shapes match and the loss still falls. Sizes, dtypes and devices both sides "
        "share (`key.view(bsz, q_len, ...)`), numbers, and a bias, scaling or flag one side alone takes by "
        "design (queries scaled, the gate clamped from one side) are not compared."
    )
    bad = (
        Example(
            """
            import torch


            def apply_rotary_pos_emb_vision(q, k, cos, sin):
                cos = cos.unsqueeze(-2).float()
                sin = sin.unsqueeze(-2)
                q_embed = (q.float() * cos) + (rotate_half(q.float()) * sin)
                k_embed = (k.float() * cos) + (rotate_half(k.float()) * sin)
                return q_embed.to(q.dtype), k_embed.to(k.dtype)
            """,
            path="veomni/models/transformers/toy/modeling_toy.py",
            title="the sine table is not upcast as its cosine sibling is",
        ),
        Example(
            """
            def apply_rotary(q, k, cos, sin):
                q_embed = (q * cos) + (rotate_half(q) * sin)
                k_embed = (q * cos) + (rotate_half(k) * sin)
                return q_embed, k_embed
            """,
            path="veomni/models/transformers/toy/modeling_toy.py",
            title="the keys' rotary reads the queries",
        ),
    )
    good = (
        Example(
            """
            import torch


            def apply_rotary_pos_emb_vision(q, k, cos, sin):
                cos = cos.unsqueeze(-2).float()
                sin = sin.unsqueeze(-2).float()
                q_embed = (q.float() * cos) + (rotate_half(q.float()) * sin)
                k_embed = (k.float() * cos) + (rotate_half(k.float()) * sin)
                return q_embed.to(q.dtype), k_embed.to(k.dtype)
            """,
            path="veomni/models/transformers/toy/modeling_toy.py",
        ),
        Example(
            """
            def project(self, hidden_states, bsz, q_len):
                query_states = self.q_proj(hidden_states) * self.scaling
                key_states = self.k_proj(hidden_states)
                key_states = key_states.view(bsz, q_len, -1, self.head_dim)
                return query_states, key_states
            """,
            path="veomni/models/transformers/toy/modeling_toy.py",
            title="the queries alone scaled, a shared length",
        ),
    )
    fix_safety = "No fix: make the statement its sibling's with the side swapped."
    requires = (("q_", "k_", "query", "cos", "sin", "gate", "chosen"),)
    node_types = _FUNCS

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        # a function of the function's text and the module's ``self`` attributes: shared with its verbatim
        # copies (a generated file's, the same function linted again by the editor)
        attributes = refedits.self_attributes(self.ctx.tree)
        for stmt, what, sibling in by_content(
            refedits.twin_edits_with, node, self.ctx.source.lines, attributes
        ):
            if first_report(self, stmt):
                self.report(
                    stmt,
                    f"this statement is its twin sibling's (`{sibling}`) with the side swapped and one more "
                    f"change: {what}",
                )
