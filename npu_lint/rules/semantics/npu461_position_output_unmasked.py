"""NPU461 position-output-unmasked."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.semantics._shared import first_report
from npu_lint.veomni import losspath

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


class PositionOutputUnmasked(Rule):
    code = "NPU461"
    name = "position-output-unmasked"
    summary = (
        "A chunked loss writes several per-position outputs over the same slice, gating them by the valid-token "
        "mask, and one of them ungated."
    )
    why = (
        "A chunked kernel (cross-entropy, distillation KL, entropy) fills per-position buffers chunk by chunk "
        "and zeroes the ignored positions (prompt, padding, `IGNORE_INDEX`) with `torch.where(mask, value, 0)`; "
        "its hand-written backward masks the same positions. One buffer written without the mask puts the "
        "ignored positions into the reported loss while its gradient still leaves them out: the loss is not the "
        "function being optimised, and its mean is taken over non-target tokens. Reported when at least two "
        "sibling stores over the same slice are gated by one mask and the ungated one is a plain local value "
        "(a helper call given the labels masks on its own)."
    )
    bad = (
        Example(
            """
            import torch


            def forward(chunks, kl, entropy, mass, mask, zero):
                for start, end, kl_chunk, ent_chunk, mass_chunk in chunks:
                    kl[start:end] = kl_chunk
                    entropy[start:end] = torch.where(mask, ent_chunk, zero)
                    mass[start:end] = torch.where(mask, mass_chunk, zero)
            """,
            path="veomni/ops/kernels/cross_entropy/chunk_distill.py",
            title="the KL of ignored positions kept",
        ),
    )
    good = (
        Example(
            """
            import torch


            def forward(chunks, kl, entropy, mass, mask, zero):
                for start, end, kl_chunk, ent_chunk, mass_chunk in chunks:
                    kl[start:end] = torch.where(mask, kl_chunk, zero)
                    entropy[start:end] = torch.where(mask, ent_chunk, zero)
                    mass[start:end] = torch.where(mask, mass_chunk, zero)
            """,
            path="veomni/ops/kernels/cross_entropy/chunk_distill.py",
        ),
    )
    fix_safety = "No fix: gate the value by the same mask."
    requires = ("mask",)
    node_types = _FUNCS

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        for stmt, buffer, mask in losspath.unmasked_sibling_stores(node):
            if not first_report(self, stmt):
                continue
            self.report(
                stmt,
                f"`{buffer}` is written without the `{mask}` gate its sibling outputs of the same slice get: the "
                "ignored positions count in it (gate it like the others)",
            )
