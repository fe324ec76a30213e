"""NPU708 window-bounds-after-slice."""

from __future__ import annotations

import ast
import re

from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (faster)
from npu_lint.rules.base import Example, Rule

_REBOUND = re.compile(r"^[ \t]*(\w+) = (\w+)(?:\[|\.narrow\()", re.MULTILINE)


def _rebinds_itself(text: str) -> bool:
    """A line `x = x[...` / `x = x.narrow(` (anchored at the line start: no backtracking over every word)."""
    return any(m.group(1) == m.group(2) for m in _REBOUND.finditer(text))


def _bound_names(node: ast.AST) -> set[str]:
    """The names a window is bounded by: the lower/upper bounds of the slices of a subscript (`x[:, s:e]`)."""
    out: set[str] = set()
    parts = node.elts if isinstance(node, ast.Tuple) else [node]
    for part in parts:
        if isinstance(part, ast.Slice):
            for bound in (part.lower, part.upper):
                if bound is not None:
                    out.update(n.id for n in _walk(bound) if isinstance(n, ast.Name))
    return out


def _window(stmt: ast.stmt) -> tuple[str, set[str]] | None:
    """``x = x[..., start:end]`` or ``x = x.narrow(dim, start, length)``: (x, the bounds' names)."""
    if not (
        isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
    ):
        return None
    name = stmt.targets[0].id
    value = stmt.value
    if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name) and value.value.id == name:
        bounds = _bound_names(value.slice)
        return (name, bounds) if bounds else None
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr == "narrow"
        and isinstance(value.func.value, ast.Name)
        and value.func.value.id == name
        and len(value.args) == 3
    ):
        bounds = {n.id for n in _walk(value.args[1]) if isinstance(n, ast.Name)}
        return (name, bounds) if bounds else None
    return None


def _stores(stmt: ast.stmt, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store) for n in _walk(stmt))


def _reads_window(stmt: ast.stmt, name: str, bounds: set[str]) -> ast.AST | None:
    """A subscript (or ``narrow``) of ``name`` in ``stmt`` bounded by one of ``bounds``."""
    for node in _walk(stmt):
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == name:
            if _bound_names(node.slice) & bounds:
                return node
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "narrow"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == name
            and len(node.args) == 3
            and any(isinstance(n, ast.Name) and n.id in bounds for a in node.args[1:] for n in _walk(a))
        ):
            return node
    return None


class WindowBoundsAfterSlice(Rule):
    code = "NPU708"
    name = "window-bounds-after-slice"
    summary = (
        "A tensor cut down to this rank's window (`x = x[:, start:end]`) is indexed with the window's bounds "
        "again, as if it still held the full sequence."
    )
    why = (
        "Under sequence parallelism each rank keeps `[start, end)` of a gathered sequence. The bounds are "
        "positions of the full sequence: once `mask = mask[:, start:end]` has re-bound the name to the rank's "
        "slice, `mask[:, :start]` (how many media tokens the earlier ranks hold, the offset into the gathered "
        "deepstack or media features) reads the rank's own slice instead, and `mask[:, start:end]` slices it a "
        "second time. On rank 0 both coincide, so single-rank tests pass; on every other rank the features are "
        "taken from the wrong rows (or the slice is empty), silently. Count or slice on the full tensor before "
        "re-binding it, or keep the full tensor under another name."
    )
    bad = (
        Example(
            """
            def take_rank_rows(video_mask, features, sp_rank, sp_size):
                per_rank = video_mask.shape[1] // sp_size
                lo, hi = sp_rank * per_rank, (sp_rank + 1) * per_rank
                video_mask = video_mask[:, lo:hi]
                before = int(video_mask[:, :lo].sum())
                return features[before : before + int(video_mask.sum())]
            """,
            path="veomni/models/transformers/glm4v/modeling_glm4v.py",
            title="the offset is counted on the already-sliced mask",
        ),
        Example(
            """
            def local_audio(audio_mask, start, length):
                audio_mask = audio_mask.narrow(1, start, length)
                skipped = audio_mask.narrow(1, 0, start).sum()
                return audio_mask, skipped
            """,
            path="veomni/models/transformers/qwen2_5_omni/modeling_qwen2_5_omni.py",
            title="the same through `narrow`",
        ),
    )
    good = (
        Example(
            """
            def take_rank_rows(video_mask, features, sp_rank, sp_size):
                per_rank = video_mask.shape[1] // sp_size
                lo, hi = sp_rank * per_rank, (sp_rank + 1) * per_rank
                before = int(video_mask[:, :lo].sum())
                video_mask = video_mask[:, lo:hi]
                return features[before : before + int(video_mask.sum())]
            """,
            path="veomni/models/transformers/glm4v/modeling_glm4v.py",
        ),
        Example(
            """
            def chunks(x, start, end):
                x = x[:, start:end]
                start = 0
                head = x[:, start:1]
                return x, head
            """,
            path="veomni/models/transformers/glm4v/modeling_glm4v.py",
            title="a bound re-assigned after the slice is a position of the window",
        ),
    )
    fix_safety = (
        "No fix: move the read before the slice (or keep the full tensor under another name) by hand."
    )

    requires = (_rebinds_itself,)

    @classmethod
    def applies_to(cls, ctx) -> bool:  # type: ignore[no-untyped-def]
        return not ctx.source.kind.test  # SP helpers under veomni/ops and veomni/distributed slice too

    node_types = (ast.FunctionDef, ast.AsyncFunctionDef)

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        self._block(node.body)

    def _block(self, body: list[ast.stmt]) -> None:
        for i, stmt in enumerate(body):
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(stmt, field, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                    if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        self._block(inner)
            for handler in getattr(stmt, "handlers", []) or []:
                self._block(handler.body)
            found = _window(stmt)
            if found is None:
                continue
            name, bounds = found
            for later in body[i + 1 :]:
                if isinstance(later, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    continue
                hit = _reads_window(later, name, bounds)
                if hit is not None:
                    self.report(
                        hit,
                        f"`{name}` was re-bound to this rank's window (`{ast.unparse(stmt.value)}`) and is indexed "
                        f"with the window's bounds ({', '.join(f'`{b}`' for b in sorted(bounds))}) again: they are "
                        "positions of the full sequence, which it no longer holds",
                    )
                    break
                if _stores(later, name) or any(_stores(later, b) for b in bounds):
                    break
