"""NPU709 companion-layout."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import own_nodes as _own_nodes  # memoised per file
from npu_lint.rules.base import Example, Rule

_LAYOUT = frozenset({"reshape", "view", "transpose", "permute", "flatten", "swapaxes", "movedim", "ravel"})
_PERMUTING = frozenset({"transpose", "permute", "swapaxes", "movedim"})
_STACKS = frozenset({"stack", "vstack", "column_stack"})


def _layout_calls(expr: ast.AST) -> tuple[str | None, list[ast.Call]]:
    """``a.reshape(...).transpose(1, 2).flatten()``: (the root name ``a``, its layout calls in call order)."""
    calls: list[ast.Call] = []
    node = expr
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        calls.append(node)
        node = node.func.value
    root = node.id if isinstance(node, ast.Name) else None
    return root, [c for c in reversed(calls) if c.func.attr in _LAYOUT]  # type: ignore[attr-defined]


def _ints(args: list[ast.expr]) -> list[int] | None:
    if len(args) == 1 and isinstance(args[0], (ast.Tuple, ast.List)):
        args = list(args[0].elts)
    out = []
    for a in args:
        if isinstance(a, ast.UnaryOp) and isinstance(a.op, ast.USub) and isinstance(a.operand, ast.Constant):
            a = ast.Constant(-a.operand.value)
        if not (isinstance(a, ast.Constant) and type(a.value) is int):
            return None
        out.append(a.value)
    return out


def _signature(calls: list[ast.Call]) -> list[str]:
    """The layout as the steps it takes: `view` as `reshape`, `ravel` as `flatten`, and each axis swap or
    permutation as the permutation it applies once the rank is known from the reshape before it (so
    `reshape(a, b, c, d).transpose(1, 2)` and `reshape(a, b, c, d).permute(0, 2, 1, 3)` are one layout)."""
    steps: list[str] = []
    rank: int | None = None
    for call in calls:
        name = call.func.attr  # type: ignore[attr-defined]
        if name in ("reshape", "view"):
            args = call.args
            rank = (
                len(args[0].elts)
                if len(args) == 1 and isinstance(args[0], (ast.Tuple, ast.List))
                else len(args)
            )
            steps.append("reshape")
            continue
        if name in ("flatten", "ravel"):
            rank = 1 if not call.args else None
            steps.append("flatten")
            continue
        axes = _ints(list(call.args))
        perm: list[int] | None = None
        if axes is not None and rank is not None:
            if name in ("transpose", "swapaxes") and len(axes) == 2:
                a, b = (x % rank for x in axes)
                perm = list(range(rank))
                perm[a], perm[b] = perm[b], perm[a]
            elif (
                name in ("permute", "transpose") and len(axes) == rank
            ):  # numpy's transpose takes the whole order
                perm = [x % rank for x in axes]
        if perm is None:
            steps.append(name)
        elif perm != list(range(len(perm))):
            steps.append("permute" + str(tuple(perm)))
    return steps


def _rebindings(func: ast.AST, name: str, before: int) -> list[tuple[ast.Assign, list[ast.Call]]]:
    """``name = name.<layout>(...)...`` statements of ``func`` before line ``before``, with their layout methods."""
    out = []
    for node in _own_nodes(func):
        if (
            isinstance(node, ast.Assign)
            and node.lineno < before
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == name
        ):
            root, calls = _layout_calls(node.value)
            if root == name:
                out.append((node, calls))
    return sorted(out, key=lambda item: item[0].lineno)


class CompanionLayout(Rule):
    code = "NPU709"
    name = "companion-layout"
    summary = (
        "Coordinate ids stacked into one position tensor (height and width ids of a vision tower) went through "
        "different reshape/transpose chains, so their rows no longer describe the same patches."
    )
    why = (
        "A vision tower's 2-D rotary embedding reads, for patch i, row i of `stack([hpos_ids, wpos_ids])`. The "
        "patches are fed in spatial-merge window order, so each id grid is reshaped into merge windows and "
        "transposed (`reshape(h // m, m, w // m, m).transpose(1, 2).flatten()`). If one companion skips the "
        "transpose (or is transposed differently), row i pairs the height of one patch with the width of "
        "another: most patches get the wrong column position, pretrained vision features degrade and nothing "
        "fails. The layout methods (`reshape`, `view`, `transpose`, `permute`, `flatten`, ...) each name is "
        "re-bound with before the stack, and those applied inside the stack's arguments, must be the same "
        "sequence for every stacked name when any of them permutes axes."
    )
    bad = (
        Example(
            """
            import torch


            def patch_positions(grid, merge):
                out = []
                for t, rows, cols in grid:
                    ys = torch.arange(rows).unsqueeze(1).expand(-1, cols)
                    ys = ys.view(rows // merge, merge, cols // merge, merge).permute(0, 2, 1, 3).flatten()
                    xs = torch.arange(cols).unsqueeze(0).expand(rows, -1)
                    xs = xs.view(rows // merge, merge, cols // merge, merge).flatten()
                    out.append(torch.stack([ys, xs], dim=-1).repeat(t, 1))
                return torch.cat(out)
            """,
            path="veomni/models/transformers/glm4v/glm4v_gpu_patch_gen_config.py",
            title="the width ids are never permuted into merge-window order",
        ),
        Example(
            """
            import numpy as np


            def grid_ids(h, w, m):
                hh = np.broadcast_to(np.arange(h)[:, None], (h, w))
                ww = np.broadcast_to(np.arange(w)[None, :], (h, w))
                hh = hh.reshape(h // m, m, w // m, m)
                return np.stack([hh.transpose(0, 2, 1, 3).flatten(), ww.flatten()], axis=-1)
            """,
            path="veomni/models/transformers/qwen2_5vl/qwen2_5_vl_gpu_patch_gen_config.py",
            title="numpy, the transpose inside the stack's arguments",
        ),
    )
    good = (
        Example(
            """
            import torch


            def patch_positions(grid, merge):
                out = []
                for t, rows, cols in grid:
                    ys = torch.arange(rows).unsqueeze(1).expand(-1, cols)
                    ys = ys.view(rows // merge, merge, cols // merge, merge).permute(0, 2, 1, 3).flatten()
                    xs = torch.arange(cols).unsqueeze(0).expand(rows, -1)
                    xs = xs.view(rows // merge, merge, cols // merge, merge).permute(0, 2, 1, 3).flatten()
                    out.append(torch.stack([ys, xs], dim=-1).repeat(t, 1))
                return torch.cat(out)
            """,
            path="veomni/models/transformers/glm4v/glm4v_gpu_patch_gen_config.py",
        ),
        Example(
            """
            import torch


            def qk(q, k):
                q = q.transpose(1, 2)
                return torch.stack([q, k.transpose(1, 2)], dim=-1)
            """,
            path="veomni/models/transformers/glm4v/glm4v_gpu_patch_gen_config.py",
            title="the same layout, once re-bound and once inline",
        ),
    )
    fix_safety = "No fix: which layout is the intended one is for the author to say."

    requires = ("stack(", ("transpose", "permute", "swapaxes", "movedim"))
    node_types = (ast.Call,)

    @classmethod
    def applies_to(cls, ctx) -> bool:  # type: ignore[no-untyped-def]
        return not ctx.source.kind.test

    def visit(self, call: ast.AST) -> None:
        if not (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr in _STACKS
            and call.args
            and isinstance(call.args[0], (ast.List, ast.Tuple))
            and len(call.args[0].elts) >= 2
        ):
            return
        func = self.ctx.enclosing(ast.FunctionDef, ast.AsyncFunctionDef)
        if func is None:
            return
        layouts: list[tuple[str, list[str], ast.AST, list[str]]] = []
        for elt in call.args[0].elts:
            root, inline = _layout_calls(elt)
            if root is None:
                return
            steps = _rebindings(func, root, call.lineno)
            calls = [c for _, cs in steps for c in cs] + inline
            at: ast.AST = steps[-1][0] if steps else elt
            layouts.append((root, [c.func.attr for c in calls], at, _signature(calls)))  # type: ignore[attr-defined]
        self._compare(call, layouts)

    def _compare(self, call: ast.Call, layouts: list[tuple[str, list[str], ast.AST, list[str]]]) -> None:
        if len({name for name, _, _, _ in layouts}) != len(layouts):
            return
        if not any(_PERMUTING & set(methods) for _, methods, _, _ in layouts):
            return
        reference = max(layouts, key=lambda item: len(item[1]))
        for name, methods, at, steps in layouts:
            if steps == reference[3]:
                continue
            self.report(
                at,
                f"`{name}` is stacked with `{reference[0]}` but laid out with "
                f"{'.'.join(methods) or 'no reshape/transpose'} where `{reference[0]}` goes through "
                f"{'.'.join(reference[1])}: their rows no longer describe the same elements",
            )
