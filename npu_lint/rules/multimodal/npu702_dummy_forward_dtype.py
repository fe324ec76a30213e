"""NPU702 dummy-forward-dtype."""

from __future__ import annotations

import ast

from npu_lint.core.diagnostics import Applicability
from npu_lint.rules._handles import method_name
from npu_lint.rules.base import Example, Rule, make_fix


class DummyForwardDtype(Rule):
    code = "NPU702"
    name = "dummy-forward-dtype"
    summary = "A modality tower's `dummy_forward` builds its fake input with `self.dtype`."
    why = (
        "`dummy_forward` runs a tower on a fake input so that text-only ranks join the tower's FSDP collectives. "
        "`self.dtype` on a transformers model is a property computed from its parameters and buffers; under "
        "FSDP/mixed precision and after a device move it can name another dtype than the one the tower's "
        "weights compute in, and the fake input then fails the first matmul (or silently upcasts). The dtype "
        "must come from a live parameter: `next(self.parameters()).dtype`."
    )
    bad = (
        Example(
            """
            import torch


            class ToyVisionModel:
                def dummy_forward(self):
                    pixel_values = torch.zeros((16, 1176), dtype=self.dtype, device=self.device)
                    return self(pixel_values)
            """,
            fixed="""
            import torch


            class ToyVisionModel:
                def dummy_forward(self):
                    pixel_values = torch.zeros((16, 1176), dtype=next(self.parameters()).dtype, device=self.device)
                    return self(pixel_values)
            """,
        ),
    )
    good = (
        Example(
            """
            import torch


            class ToyVisionModel:
                def dummy_forward(self):
                    weight = next(self.parameters())
                    pixel_values = torch.zeros((16, 1176), dtype=weight.dtype, device=weight.device)
                    return self(pixel_values)
            """
        ),
    )
    fix_safety = (
        "Safe: `self.dtype` becomes `next(self.parameters()).dtype`, the dtype of the tower's first parameter "
        "(what `self.dtype` means on an unsharded full-precision model)."
    )

    node_types = (ast.Attribute,)

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Attribute)
        if node.attr != "dtype" or not isinstance(node.value, ast.Name) or node.value.id != "self":
            return
        if not isinstance(node.ctx, ast.Load):
            return
        func = self.ctx.function
        name = method_name(func)
        if name is None or "dummy_forward" not in name:
            return
        fix = make_fix(
            "Read the dtype from a parameter",
            [self.ctx.replace(node, "next(self.parameters()).dtype")],
            Applicability.SAFE,
        )
        self.report(
            node, "`dummy_forward` takes its dtype from `self.dtype`; read it from a live parameter", fix
        )
