"""``json`` (one array) and ``json-lines`` (one object per line) formats.

Each diagnostic becomes an object in the shape ruff users already parse::

    {"code": "NPU001", "name": "cuda-device-call", "message": "...", "severity": "warning",
     "filename": "/abs/path/model.py", "location": {"row": 3, "column": 5},
     "end_location": {"row": 3, "column": 11},
     "fix": {"applicability": "safe", "message": "...", "edits": [
         {"content": "...", "location": {"row": 3, "column": 5}, "end_location": {"row": 3, "column": 11}}]},
     "url": "https://.../NPU001.md", "origin": {"filename": "/abs/spec.yaml", "row": 12, "note": "..."}}

Rows and columns are 1-based; columns count characters (code points). Edit locations are computed from the
file text; when the file cannot be read an edit carries its raw code-point offsets as ``start``/``end``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from npu_lint.core.diagnostics import Diagnostic, Edit, Fix
from npu_lint.report import RenderContext


def _location(row: int, col0: int) -> dict[str, int]:
    return {"row": row, "column": col0 + 1}


def _edit(edit: Edit, d: Diagnostic, ctx: RenderContext) -> dict[str, Any]:
    src = ctx.source(d.path)
    if src is None:
        return {"content": edit.content, "start": edit.start, "end": edit.end}
    return {
        "content": edit.content,
        "location": _location(*src.position(edit.start)),
        "end_location": _location(*src.position(edit.end)),
    }


def _fix(fix: Fix, d: Diagnostic, ctx: RenderContext) -> dict[str, Any]:
    data: dict[str, Any] = {
        "applicability": fix.applicability.value,
        "message": fix.title,
        "edits": [_edit(e, d, ctx) for e in sorted(fix.edits)],
    }
    if fix.creates:
        data["creates"] = [{"filename": ctx.abspath(c.path), "content": c.content} for c in fix.creates]
    if fix.reason:
        data["reason"] = fix.reason
    return data


def diagnostic_to_json(d: Diagnostic, ctx: RenderContext) -> dict[str, Any]:
    """The JSON object of one diagnostic."""
    return {
        "code": d.code,
        "name": d.name,
        "message": d.message,
        "severity": d.severity,
        "filename": ctx.abspath(d.path),
        "location": _location(d.line, d.col),
        "end_location": _location(d.end_line, d.end_col),
        "fix": _fix(d.fix, d, ctx) if d.fix is not None else None,
        "url": d.url,
        "origin": (
            {"filename": ctx.abspath(d.origin.path), "row": d.origin.line, "note": d.origin.note}
            if d.origin is not None
            else None
        ),
    }


def render_json(diagnostics: Sequence[Diagnostic], ctx: RenderContext) -> str:
    return json.dumps([diagnostic_to_json(d, ctx) for d in diagnostics], indent=2) + "\n"


def render_json_lines(diagnostics: Sequence[Diagnostic], ctx: RenderContext) -> str:
    return "".join(json.dumps(diagnostic_to_json(d, ctx), separators=(",", ":")) + "\n" for d in diagnostics)
