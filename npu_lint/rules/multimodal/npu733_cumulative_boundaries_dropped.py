"""NPU733 cumulative-boundaries-dropped."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import call_name, int_value, nodes_of
from npu_lint.core.astutil import walk as _walk
from npu_lint.rules.base import Context, Example, Rule


def _name(expr: ast.AST) -> str | None:
    """The text of a plain name or dotted attribute (`cu_seqlens`, `self.cu_seqlens`), else None."""
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute) and _name(expr.value) is not None:
        return f"{_name(expr.value)}.{expr.attr}"
    return None


def _head(expr: ast.AST) -> tuple[str, int] | None:
    """(vector, k) for a constant-length head of a vector: `cu[:k]`, `cu[0:k]` (k >= 1), `cu[0].unsqueeze(0)`,
    `cu[0].view(1)`, `cu[[0]]`."""
    if (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Attribute)
        and expr.func.attr
        in (
            "unsqueeze",
            "view",
            "reshape",
        )
    ):
        inner = expr.func.value
        if isinstance(inner, ast.Subscript) and int_value(inner.slice) == 0 and _name(inner.value):
            return _name(inner.value), 1  # type: ignore[return-value]
        return None
    if not isinstance(expr, ast.Subscript) or _name(expr.value) is None:
        return None
    index = expr.slice
    if isinstance(index, ast.Slice) and index.step is None and index.upper is not None:
        lower = 0 if index.lower is None else int_value(index.lower)
        upper = int_value(index.upper)
        if lower == 0 and upper is not None and upper >= 1:
            return _name(expr.value), upper  # type: ignore[return-value]
    if isinstance(index, ast.List) and len(index.elts) == 1 and int_value(index.elts[0]) == 0:
        return _name(expr.value), 1  # type: ignore[return-value]
    return None


def _reads_end(expr: ast.AST, vector: str | None = None) -> bool:
    """Whether ``expr`` reads the last entry of ``vector`` (of any vector when None): `cu[-1]`, `cu[-1:]`,
    `cu.max()`."""
    for n in _walk(expr):
        if isinstance(n, ast.Subscript) and _name(n.value) is not None and vector in (None, _name(n.value)):
            index = n.slice
            if int_value(index) == -1:
                return True
            if isinstance(index, ast.Slice) and index.upper is None and int_value(index.lower) == -1:
                return True
        if (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "max"
            and _name(n.func.value) is not None
            and vector in (None, _name(n.func.value))
        ):
            return True
    return False


def _end_extended(expr: ast.AST) -> bool:
    """Whether ``expr`` computes a new end past a vector's last entry: `cu[-1] + pad`, `pad + cu[-1:]`."""
    return any(
        isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add) and (_reads_end(n.left) or _reads_end(n.right))
        for n in _walk(expr)
    )


def _mentions(expr: ast.AST, vector: str) -> bool:
    return any(_name(n) == vector for n in _walk(expr) if isinstance(n, (ast.Name, ast.Attribute)))


class CumulativeBoundariesDropped(Rule):
    code = "NPU733"
    name = "cumulative-boundaries-dropped"
    summary = (
        "A cumulative-lengths vector (`cu_seqlens`) extended with a new end computed from its last entry keeps only "
        "its first entries: every boundary in between is dropped."
    )
    why = (
        "Packed sequences are described by the cumulative lengths of their pieces (`cu_seqlens = [0, l0, l0 + l1, "
        "...]`): the varlen attention kernels attend within each `[cu[i], cu[i + 1])` range. Sequence-parallel "
        "padding appends one more boundary for the pad (`new_end = cu[-1] + pad; cu = torch.cat([cu, "
        "new_end.unsqueeze(0)])`) so the pad is a piece of its own. Concatenating the new end to a constant-length "
        "head of the vector instead (`torch.cat([cu[:1], new_end])`) keeps `[0, total + pad]`: every image, window, "
        "audio chunk or packed sample of the micro-batch, and the pad, becomes one sequence, and tokens attend "
        "across them with no error. The contract is read from the expression itself, in any file: the appended "
        "value is a new end past a vector's last entry (`cu[-1] + pad`, `cu[-1:] + pad`, `cu.max() + pad`), so "
        "it extends the vector (or a twin sharing its end, `cu_window_seqlens`), which must then be kept whole. Rebuilding a vector from its leading zero and new lengths "
        "(`torch.cat([cu[:1], lengths.cumsum(0)])`) and replacing its last boundary (`cu[:-1]`) are not reported."
    )
    bad = (
        Example(
            """
            import torch


            def pad_vision_tokens(hidden_states, cu_seqlens, pad):
                if pad > 0:
                    hidden_states = torch.nn.functional.pad(hidden_states, (0, 0, 0, pad))
                    new_cumsum = cu_seqlens[-1] + pad
                    cu_seqlens = torch.cat([cu_seqlens[:1], new_cumsum.unsqueeze(0)], dim=0)
                return hidden_states, cu_seqlens
            """,
            path="veomni/models/transformers/toy/modeling_toy_vision.py",
            title="the padded end appended to the leading zero alone",
        ),
    )
    good = (
        Example(
            """
            import torch


            def pad_vision_tokens(hidden_states, cu_seqlens, pad):
                if pad > 0:
                    hidden_states = torch.nn.functional.pad(hidden_states, (0, 0, 0, pad))
                    new_cumsum = cu_seqlens[-1] + pad
                    cu_seqlens = torch.cat([cu_seqlens, new_cumsum.unsqueeze(0)], dim=0)
                return hidden_states, cu_seqlens
            """,
            path="veomni/models/transformers/toy/modeling_toy_vision.py",
        ),
        Example(
            """
            import torch


            def rebuild(cu_seqlens, lengths):
                return torch.cat([cu_seqlens[:1], lengths.cumsum(0)])
            """,
            path="veomni/data/toy_packing.py",
        ),
    )
    fix_safety = "No fix: which boundaries the head was meant to keep is for the author to confirm."

    requires = ("cat",)
    node_types = (ast.FunctionDef, ast.AsyncFunctionDef)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        """Any code of the tree (models, data collators, ops kernels, distributed helpers), not tests."""
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        if self.ctx.function is not None:
            return  # a nested function: the enclosing function's walk covers it (once)
        assigns = [
            a
            for a in nodes_of(node, ast.Assign)
            if isinstance(a, ast.Assign) and len(a.targets) == 1 and isinstance(a.targets[0], ast.Name)
        ]
        for call in nodes_of(node, ast.Call):
            if not (isinstance(call, ast.Call) and call_name(call) in ("cat", "concat", "concatenate")):
                continue
            if not call.args or not isinstance(call.args[0], (ast.List, ast.Tuple)):
                continue
            parts = call.args[0].elts
            if len(parts) < 2:
                continue
            head = _head(parts[0])
            if head is None:
                continue
            vector, k = head
            rest = parts[1:]
            if any(_mentions(p, vector) and not _end_extended(p) for p in rest):
                continue  # the vector's other entries, rebuilt (`cu[:1]`, `cu[2:]`)
            if not any(self._from_end(p, vector, assigns, call.lineno) for p in rest):
                continue
            self.report(
                parts[0],
                f"`{self.ctx.source.segment(parts[0])}` keeps the first {k} entr{'y' if k == 1 else 'ies'} of "
                f"`{vector}` before a new end computed past a last entry: every boundary in between is dropped, "
                f"so the pieces it separated are attended as one sequence; keep the whole vector (`{vector}`)",
            )

    @staticmethod
    def _from_end(expr: ast.AST, vector: str, assigns: list[ast.Assign], line: int) -> bool:
        """``expr`` is derived from the vector's last entry: directly, or through locals assigned before."""
        seen: set[str] = set()
        todo = [expr]
        while todo:
            current = todo.pop()
            if _end_extended(current):
                return True
            for n in _walk(current):
                if isinstance(n, ast.Name) and n.id not in seen and n.id != vector:
                    seen.add(n.id)
                    before = [a for a in assigns if a.targets[0].id == n.id and a.lineno < line]  # type: ignore[union-attr]
                    if before:
                        todo.append(max(before, key=lambda a: a.lineno).value)
            if len(seen) > 16:
                break
        return False
