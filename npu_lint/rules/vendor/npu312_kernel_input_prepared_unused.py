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
        "and never reads it, or reads it in one call of the kernel while a sibling call of the same kernel gets "
        "the unprepared value at that argument: the `torch_npu` kernel is handed the unprepared value."
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
        Example(
            """
            import torch_npu


            def rotary_forward(q, k, cos, sin, unsqueeze_dim=1):
                cos_u = cos.unsqueeze(unsqueeze_dim)
                sin_u = sin.unsqueeze(unsqueeze_dim)
                q_embed = torch_npu.npu_rotary_mul(q, cos_u, sin_u)
                k_embed = torch_npu.npu_rotary_mul(k, cos, sin_u)
                return q_embed, k_embed
            """,
            path="veomni/ops/kernels/rope/full/npu.py",
            title="the key's call of the kernel skips the cos the query's call gets",
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
        made: dict[str, tuple[str, ast.Assign]] = {}  # prepared local -> (its source name, its assignment)
        for assign in nodes_of(node, ast.Assign):
            assert isinstance(assign, ast.Assign)
            value = assign.value
            if len(assign.targets) != 1 or not isinstance(assign.targets[0], ast.Name):
                continue
            target = assign.targets[0].id
            if not isinstance(value, ast.Call) or not isinstance(value.func, ast.Attribute):
                continue
            if value.func.attr in _PREPARES and isinstance(value.func.value, ast.Name):
                source = value.func.value.id
                if source != target:
                    made.setdefault(target, (source, assign))
                if target not in loads:
                    prepared.setdefault(source, (target, assign))
        if not prepared and not made:
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
        if made:
            self._twin_unprepared(node, calls, made, own, imported)

    def _twin_unprepared(
        self,
        func: ast.AST,
        calls: list[ast.AST],
        made: dict[str, tuple[str, ast.Assign]],
        own: set[int],
        imported: frozenset[str],
    ) -> None:
        """One call of a kernel gets the prepared local (``npu_rotary_mul(q, cos_u, sin_u)``) and a sibling call
        of the same kernel gets the source at the same slot (``npu_rotary_mul(k, cos, sin)``): the function
        prepared the value for that slot, so the sibling hands the kernel the unprepared one."""
        # (kernel, slot) -> the prepared locals passed there (with the index they are read at: `freqs_b[0]`)
        slots: dict[tuple[str, int | str], set[tuple[str, str]]] = {}
        for call in calls:
            assert isinstance(call, ast.Call)
            kernel = kernel_of(call, imported) or ""
            for slot, arg in _slots(call):
                name, part = _base(arg)
                if name in made:
                    slots.setdefault((kernel, slot), set()).add((name, part))
        parents: dict[int, tuple[ast.AST, list[ast.stmt]]] = {}  # statement -> (its parent, its block)
        for parent in ast.walk(func):
            for _field, block in ast.iter_fields(parent):
                if isinstance(block, list):
                    for stmt in block:
                        if isinstance(stmt, ast.stmt):
                            parents[id(stmt)] = (parent, block)
        for call in calls:
            assert isinstance(call, ast.Call)
            if id(call) not in own:
                continue
            kernel = kernel_of(call, imported) or ""
            for slot, arg in _slots(call):
                name, part = _base(arg)
                if name is None:
                    continue
                for local, their_part in sorted(slots.get((kernel, slot), ())):
                    source, assign = made[local]
                    if source != name or part != their_part or id(assign) not in own:
                        continue
                    if not _dominates(assign, call, func, parents):
                        continue  # prepared on another path (a mode switch's arm) or after this call
                    self.report(
                        arg,
                        f"`{name}` is passed to `{kernel}` as it came, but a sibling call of the same kernel gets "
                        f"`{local} = {ast.unparse(assign.value)}` (line {assign.lineno}) at this argument: the "
                        f"function prepared the value for the kernel and this call skips it; pass `{local}`",
                    )
                    return


def _dominates(
    assign: ast.stmt, call: ast.Call, func: ast.AST, parents: dict[int, tuple[ast.AST, list[ast.stmt]]]
) -> bool:
    """The preparation runs before ``call`` on every path to it: a statement of the preparation's own block
    after it holds the call (a call on the other arm of a branch, or before the preparation, is one the value
    was not prepared for)."""
    entry = parents.get(id(assign))
    if entry is None:
        return False
    block = entry[1]
    index = next(i for i, stmt in enumerate(block) if stmt is assign)
    later = {id(stmt) for stmt in block[index + 1 :]}
    for stmt in ast.walk(func):
        if id(stmt) in later and any(n is call for n in ast.walk(stmt)):
            return True
    return False


def _base(arg: ast.expr) -> tuple[str | None, str]:
    """``x`` -> (``x``, ""); ``x[0]`` -> (``x``, "0"): the name an argument hands on and the constant index it
    reads (a cos/sin pair stacked in one tensor); (None, "") for any other expression."""
    if isinstance(arg, ast.Name):
        return arg.id, ""
    if (
        isinstance(arg, ast.Subscript)
        and isinstance(arg.value, ast.Name)
        and isinstance(arg.slice, ast.Constant)
    ):
        return arg.value.id, repr(arg.slice.value)
    return None, ""


def _slots(call: ast.Call) -> list[tuple[int | str, ast.expr]]:
    """A call's arguments by position (before any ``*args``) and by keyword."""
    out: list[tuple[int | str, ast.expr]] = []
    for index, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            break
        out.append((index, arg))
    out.extend((kw.arg, kw.value) for kw in call.keywords if kw.arg is not None)
    return out
