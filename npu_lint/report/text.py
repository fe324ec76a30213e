"""Human-readable formats: ``text`` (with a source excerpt) and ``concise`` (one line per diagnostic).

Layout of one ``text`` diagnostic::

    src/model.py:3:9: NPU001 [*] `.cuda()` moves the tensor to a CUDA device
       |
     3 | x = y.cuda()
       |      ^^^^^^^
       |
       = help: Replace with `.to(device)`
       = origin: patches/model.yaml:12 generated from this patch

Columns are 1-based and count characters (code points). ``[*]`` marks a fix that ``--fix`` would apply.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

from npu_lint.core.diagnostics import SEVERITY_ERROR, Applicability, Diagnostic, Fix, display_path
from npu_lint.report import RenderContext, fix_is_applicable

TAB_WIDTH = 4
MAX_FIX_PREVIEW_LINES = 12
MAX_EXCERPT_CHARS = 240  # of a source line shown in an excerpt or a fix preview
EXCERPT_CONTEXT = 60  # characters shown before the finding's column when the line is cut


class _Style:
    """ANSI styling that collapses to plain text when color is off."""

    RESET = "\x1b[0m"

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def _wrap(self, code: str, text: str) -> str:
        if not self.enabled or not text:
            return text
        return f"\x1b[{code}m{text}{self.RESET}"

    def bold(self, text: str) -> str:
        return self._wrap("1", text)

    def error(self, text: str) -> str:
        return self._wrap("1;31", text)

    def warning(self, text: str) -> str:
        return self._wrap("1;33", text)

    def gutter(self, text: str) -> str:
        return self._wrap("1;34", text)

    def fixable(self, text: str) -> str:
        return self._wrap("1;36", text)

    def note(self, text: str) -> str:
        return self._wrap("36", text)

    def dim(self, text: str) -> str:
        return self._wrap("2", text)

    def removed(self, text: str) -> str:
        return self._wrap("31", text)

    def added(self, text: str) -> str:
        return self._wrap("32", text)


def _char_width(ch: str) -> int:
    if unicodedata.combining(ch) or ch in "\u200b\u200c\u200d\ufeff":
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def _expand(line: str) -> tuple[str, list[int]]:
    """Expand tabs; return the display text and the display column of every code point (plus the end)."""
    if line.isascii() and line.isprintable():  # no tab, no control character: one column per code point
        return line, list(range(len(line) + 1))
    out: list[str] = []
    cols: list[int] = []
    width = 0
    for ch in line:
        cols.append(width)
        if ch == "\t":
            pad = TAB_WIDTH - width % TAB_WIDTH
            out.append(" " * pad)
            width += pad
        elif ch < " " or ch == "\x7f":  # other control characters: show as a visible placeholder
            out.append("\ufffd")
            width += 1
        else:
            out.append(ch)
            width += _char_width(ch)
    cols.append(width)
    return "".join(out), cols


def _window(line: str, start: int, end: int) -> tuple[str, int, int]:
    """At most ``MAX_EXCERPT_CHARS`` of ``line`` around ``start``, elided with ``…`` on either side, and the span
    in it: a minified or generated line of megabytes with thousands of findings was printed whole for each (output
    and memory grew with findings x line length)."""
    if len(line) <= MAX_EXCERPT_CHARS:
        return line, start, end
    first = max(0, min(start - EXCERPT_CONTEXT, len(line) - MAX_EXCERPT_CHARS))
    last = first + MAX_EXCERPT_CHARS
    head = "…" if first else ""
    tail = "…" if last < len(line) else ""
    shift = len(head) - first
    return head + line[first:last] + tail, start + shift, min(end, last) + shift


def _clip(text: str) -> str:
    return text if len(text) <= MAX_EXCERPT_CHARS else text[:MAX_EXCERPT_CHARS] + "…"


def _header(d: Diagnostic, ctx: RenderContext, style: _Style) -> str:
    path = ctx.display_path(d.path)
    location = f"{style.bold(path)}{style.dim(':')}{d.line}{style.dim(':')}{d.col + 1}{style.dim(':')}"
    code = style.error(d.code) if d.severity == SEVERITY_ERROR else style.warning(d.code)
    marker = f" {style.fixable('[*]')}" if fix_is_applicable(d.fix, ctx.unsafe_fixes) else ""
    return f"{location} {code}{marker} {display_path(d.message)}"


def _origin_text(d: Diagnostic, ctx: RenderContext) -> str:
    assert d.origin is not None
    text = f"{ctx.display_path(d.origin.path)}:{d.origin.line}"
    return f"{text} {d.origin.note}" if d.origin.note else text


def _excerpt(d: Diagnostic, ctx: RenderContext, style: _Style, gutter_width: int) -> list[str]:
    source = ctx.line_text(d, d.line)  # ``source_line``, or the line read from the file
    if source is None:
        return []
    start = min(max(d.col, 0), len(source))
    if d.end_line == d.line:
        end = min(max(d.end_col, start), len(source))
    else:  # multi-line range: underline to the end of the first line
        end = len(source)
    source, start, end = _window(source, start, end)
    shown, cols = _expand(source)
    width = cols[end] - cols[start]
    underline = " " * cols[start] + "^" * max(width, 1)
    pad = " " * gutter_width
    return [
        style.gutter(f"{pad} |"),
        style.gutter(f"{str(d.line).rjust(gutter_width)} |") + (f" {shown}" if shown else ""),
        style.gutter(f"{pad} |") + " " + style.error(underline),
        style.gutter(f"{pad} |"),
    ]


def _fix_preview(fix: Fix, d: Diagnostic, ctx: RenderContext, style: _Style, gutter_width: int) -> list[str]:
    """Old and new text of the lines the fix's edits touch (needs the file; empty when unreadable)."""
    if not fix.edits:
        return []
    src = ctx.source(d.path)
    if src is None:
        return []
    edits = sorted(fix.edits)
    first_row = src.position(edits[0].start)[0]
    last_row = src.position(max(e.end for e in edits))[0]
    seg_start = src.line_offset(first_row)
    seg_end = src.line_offset(last_row) + len(src.line_text(last_row))
    old = src.text[seg_start:seg_end]
    new_parts: list[str] = []
    cursor = seg_start
    for edit in edits:
        if edit.start < cursor:  # overlapping edits: not previewable
            return []
        new_parts.append(src.text[cursor : edit.start])
        new_parts.append(edit.content)
        cursor = edit.end
    new_parts.append(src.text[cursor:seg_end])
    new = "".join(new_parts)
    old_lines = old.splitlines() or [""]
    new_lines = new.splitlines() if new else []
    lines: list[str] = []
    pad = " " * gutter_width
    for i, text in enumerate(old_lines[:MAX_FIX_PREVIEW_LINES]):
        lines.append(
            style.gutter(f"{str(first_row + i).rjust(gutter_width)} ") + style.removed(f"- {_clip(text)}")
        )
    for text in new_lines[:MAX_FIX_PREVIEW_LINES]:
        lines.append(style.gutter(f"{pad} ") + style.added(f"+ {_clip(text)}"))
    if len(old_lines) > MAX_FIX_PREVIEW_LINES or len(new_lines) > MAX_FIX_PREVIEW_LINES:
        lines.append(style.gutter(f"{pad} ") + style.dim("  ..."))
    return lines


def _notes(d: Diagnostic, ctx: RenderContext, style: _Style, gutter_width: int) -> list[str]:
    pad = " " * gutter_width
    lines: list[str] = []
    fix = d.fix
    if fix is not None:
        lines.append(f"{pad} {style.note('= help:')} {fix.title}")
        if fix.applicability is Applicability.UNSAFE and fix.is_applicable and not ctx.unsafe_fixes:
            reason = f" ({fix.reason})" if fix.reason else ""
            lines.append(f"{pad} {style.note('= note:')} unsafe fix{reason}; enable with `--unsafe-fixes`")
        elif fix.applicability is Applicability.DISPLAY and fix.reason and ctx.show_fixes:
            lines.append(f"{pad} {style.note('= note:')} not applied automatically ({fix.reason})")
        if ctx.show_fixes:
            for created in fix.creates:
                lines.append(f"{pad} {style.note('= creates:')} {ctx.display_path(created.path)}")
    if d.origin is not None:
        lines.append(f"{pad} {style.note('= origin:')} {_origin_text(d, ctx)}")
    if ctx.show_fixes and fix is not None:
        lines.extend(_fix_preview(fix, d, ctx, style, gutter_width))
    return lines


def render_text(diagnostics: Sequence[Diagnostic], ctx: RenderContext) -> str:
    style = _Style(ctx.color)
    blocks: list[str] = []
    for d in diagnostics:
        gutter_width = max(len(str(d.line)), 2)
        if ctx.show_fixes and d.fix is not None and d.fix.edits:
            src = ctx.source(d.path)
            if src is not None:
                last = src.position(max(e.end for e in d.fix.edits))[0]
                gutter_width = max(gutter_width, len(str(last)))
        lines = [_header(d, ctx, style)]
        lines.extend(_excerpt(d, ctx, style, gutter_width))
        lines.extend(_notes(d, ctx, style, gutter_width))
        blocks.append("\n".join(lines) + "\n")
    return "\n".join(blocks)


def render_concise(diagnostics: Sequence[Diagnostic], ctx: RenderContext) -> str:
    style = _Style(ctx.color)
    out: list[str] = []
    for d in diagnostics:
        line = _header(d, ctx, style)
        if d.origin is not None:
            line += " " + style.dim(f"(origin: {_origin_text(d, ctx)})")
        out.append(line + "\n")
    return "".join(out)
