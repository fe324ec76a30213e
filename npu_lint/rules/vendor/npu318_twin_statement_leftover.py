"""NPU318 twin-statement-leftover."""

from __future__ import annotations

import ast

from npu_lint.core.memo import by_content
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni import twins


class TwinStatementLeftover(Rule):
    code = "NPU318"
    name = "twin-statement-leftover"
    summary = (
        "A statement written for one role of a pair (the key, `sin`, the video stream, the up projection, the "
        "output splits) is its twin statement for the other role with every role word swapped but one: it reads "
        "the other role's value (`k_embed = npu_rotary_mul(q, cos, sin)` beside `q_embed = npu_rotary_mul(q, "
        "cos, sin)`)."
    )
    why = (
        "Kernel adapters, their eager references and parallel helpers compute two roles side by side: the query "
        "and the key rotation, `cos` and `sin` prepared for a kernel, image and video features, input and output "
        "split sizes of an all-to-all, the gate and the up projection. The second statement is written by "
        "copying the first and swapping its role words, and the first is its reference: when one word is left "
        "unswapped, the key is rotated from the query, `sin` is `cos` unsqueezed, the output splits are the input "
        "splits. Shapes match, nothing raises, and the model trains on the wrong tensor. A statement is reported "
        "when another statement of the same function, with its role words swapped, gives it back except for one "
        "word of the other role whose counterpart the function has (`q_len` beside `key_states` is a shared "
        "read when there is no `k_len`)."
    )
    bad = (
        Example(
            """
            import torch_npu


            def rotary_forward(q, k, cos, sin, unsqueeze_dim=1):
                cos_u = cos.unsqueeze(unsqueeze_dim)
                sin_u = sin.unsqueeze(unsqueeze_dim)
                q_embed = torch_npu.npu_rotary_mul(q, cos_u, sin_u).to(q.dtype)
                k_embed = torch_npu.npu_rotary_mul(q, cos_u, sin_u).to(k.dtype)
                return q_embed, k_embed
            """,
            path="veomni/ops/kernels/toy_rope/npu.py",
            title="the key rotated from the query",
        ),
        Example(
            """
            def all_to_all_sizes(input_splits, output_splits, world):
                input_sizes = [s * world for s in input_splits]
                output_sizes = [s * world for s in input_splits]
                return input_sizes, output_sizes
            """,
            path="veomni/distributed/toy_comm.py",
            title="the output sizes computed from the input splits",
        ),
    )
    good = (
        Example(
            """
            import torch_npu


            def rotary_forward(q, k, cos, sin, unsqueeze_dim=1):
                cos_u = cos.unsqueeze(unsqueeze_dim)
                sin_u = sin.unsqueeze(unsqueeze_dim)
                q_embed = torch_npu.npu_rotary_mul(q, cos_u, sin_u).to(q.dtype)
                k_embed = torch_npu.npu_rotary_mul(k, cos_u, sin_u).to(k.dtype)
                return q_embed, k_embed
            """,
            path="veomni/ops/kernels/toy_rope/npu.py",
        ),
        Example(
            """
            def project(self, hidden_states, q_len):
                query_states = self.q_proj(hidden_states).view(1, q_len, -1)
                key_states = self.k_proj(hidden_states).view(1, q_len, -1)
                return query_states, key_states
            """,
            path="veomni/models/transformers/toy/modeling_toy.py",
        ),
    )
    fix_safety = "No fix: swap the leftover word for its counterpart."
    node_types = (ast.FunctionDef, ast.AsyncFunctionDef)
    requires = ("_",)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        # a function of the function's subtree alone: shared with its verbatim copies (core.memo.by_content)
        for stmt, leftover, expected in by_content(twins.twin_leftovers, node, self.ctx.source.lines):
            self.report(
                stmt,
                f"`{leftover}` in a statement that is otherwise its twin statement's with every role word "
                f"swapped: the other role's value is read here; the twin gives `{expected}`",
            )
