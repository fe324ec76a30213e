"""``github`` format: GitHub Actions workflow commands that show up as annotations on pull requests.

One line per diagnostic::

    ::warning title=npu-lint (NPU001),file=src/model.py,line=3,col=5,endLine=3,endColumn=11::NPU001 message

Columns are 1-based (characters); paths are relative to the project root when under it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from npu_lint.core.diagnostics import SEVERITY_ERROR, Diagnostic, display_path
from npu_lint.report import RenderContext


def escape_data(text: str) -> str:
    """Escape a command's message part."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """Escape a command property value (additionally ``:`` and ``,``, which delimit properties)."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _file(path: str, ctx: RenderContext) -> str:
    rel = ctx.relpath(path)
    return display_path((rel if rel is not None else path).replace(os.sep, "/"))


def render_github(diagnostics: Sequence[Diagnostic], ctx: RenderContext) -> str:
    out: list[str] = []
    for d in diagnostics:
        command = "error" if d.severity == SEVERITY_ERROR else "warning"
        end_line = max(d.end_line, d.line)
        properties = {
            "title": f"npu-lint ({d.code})",
            "file": _file(d.path, ctx),
            "line": str(max(d.line, 1)),
            "col": str(d.col + 1),
            "endLine": str(max(end_line, 1)),
            "endColumn": str(d.end_col + 1),
        }
        message = f"{d.code} {d.message}"
        if d.origin is not None:
            origin = f"{_file(d.origin.path, ctx)}:{d.origin.line}"
            message += f" (origin: {origin}{' ' + d.origin.note if d.origin.note else ''})"
        props = ",".join(f"{key}={escape_property(value)}" for key, value in properties.items())
        out.append(f"::{command} {props}::{escape_data(message)}\n")
    return "".join(out)
