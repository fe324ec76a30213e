"""NPU312 kernel-input-prepared-unused."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import nodes_of, own_nodes
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.npucalls import kernel_of, torch_npu_names

# tensor methods that reshape, cast or lay out a value for a kernel
_PREPARES = frozenset(
    {
        "unsqueeze",
        "squeeze",
        "view",
        "reshape",
        "transpose",
        "permute",
        "contiguous",
        "to",
        "float",
        "half",
        "bfloat16",
        "int",
        "long",
        "flatten",
        "unflatten",
        "expand",
        "repeat",
        "repeat_interleave",
        "chunk",
        "narrow",
    }
)


class KernelInputPreparedUnused(Rule):
    code = "NPU312"
    name = "kernel-input-prepared-unused"
    summary = (
        "A function prepares a value for an Ascend kernel (`cos_u = cos.unsqueeze(dim)`, `idx = idx32.to(...)`) "
        "and never reads it: the `torch_npu` kernel is handed the unprepared value instead."
    )
    why = (
        "An adapter reshapes, casts or lays out its inputs because the Ascend kernel's contract differs from the "
        "eager code's: `npu_rotary_mul` wants cos/sin broadcastable against `[b, h, s, d]`, index inputs must be "
        "int32, a layout wants a contiguous tensor. When the prepared local is left unread and the kernel gets "
        "the original, the kernel either rejects the shape on Ascend only, or broadcasts over the wrong axis and "
        "returns plausible numbers. The function's own preparation is the reference: the value it made for the "
        "kernel is the one the kernel must get."
    )
    bad = (
        Example(
            """
            import torch_npu


            def rotary_forward(q, k, cos, sin, unsqueeze_dim=1):
                cos_u = cos.unsqueeze(unsqueeze_dim)
                sin_u = sin.unsqueeze(unsqueeze_dim)
                q_embed = torch_npu.npu_rotary_mul(q, cos, sin)
                k_embed = torch_npu.npu_rotary_mul(k, cos, sin)
                return q_embed, k_embed
            """,
            path="veomni/ops/kernels/toy_rope/npu.py",
            title="cos/sin unsqueezed for the kernel, the originals passed",
        ),
    )
    good = (
        Example(
            """
            import torch_npu


            def rotary_forward(q, k, cos, sin, unsqueeze_dim=1):
                cos_u = cos.unsqueeze(unsqueeze_dim)
                sin_u = sin.unsqueeze(unsqueeze_dim)
                q_embed = torch_npu.npu_rotary_mul(q, cos_u, sin_u)
                k_embed = torch_npu.npu_rotary_mul(k, cos_u, sin_u)
                return q_embed, k_embed
            """,
            path="veomni/ops/kernels/toy_rope/npu.py",
        ),
    )
    fix_safety = "No fix: pass the prepared value (or drop the preparation) by hand."
    requires = ("torch_npu",)
    node_types = (ast.FunctionDef, ast.AsyncFunctionDef)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        imported = self.ctx.memo.get("npucalls.imported")
        if imported is None:
            imported = self.ctx.memo["npucalls.imported"] = torch_npu_names(self.ctx.tree)
        calls = [c for c in nodes_of(node, ast.Call) if kernel_of(c, imported) is not None]  # type: ignore[arg-type]
        if not calls:
            return
        loads = {n.id for n in nodes_of(node, ast.Name) if isinstance(n.ctx, ast.Load)}  # type: ignore[attr-defined]
        prepared: dict[str, tuple[str, ast.Assign]] = {}  # source name -> (unread local, its assignment)
        for assign in nodes_of(node, ast.Assign):
            assert isinstance(assign, ast.Assign)
            value = assign.value
            if len(assign.targets) != 1 or not isinstance(assign.targets[0], ast.Name):
                continue
            target = assign.targets[0].id
            if (
                target in loads
                or not isinstance(value, ast.Call)
                or not isinstance(value.func, ast.Attribute)
            ):
                continue
            if value.func.attr in _PREPARES and isinstance(value.func.value, ast.Name):
                prepared.setdefault(value.func.value.id, (target, assign))
        if not prepared:
            return
        # a closure's own preparation and call are reported when the closure is visited, not again from here
        own = {id(n) for n in own_nodes(node)}
        for call in calls:
            assert isinstance(call, ast.Call)
            for arg in (*call.args, *(k.value for k in call.keywords)):
                if isinstance(arg, ast.Name) and arg.id in prepared:
                    local, assign = prepared[arg.id]
                    if id(call) not in own and id(assign) not in own:
                        continue
                    self.report(
                        arg,
                        f"`{arg.id}` is passed to the Ascend kernel as it came, but the function prepared "
                        f"`{local} = {ast.unparse(assign.value)}` (line {assign.lineno}) for it and never reads "
                        f"it: the kernel gets the unprepared value; pass `{local}`",
                    )
                    return
