"""Output formats for diagnostics.

``render(fmt, diagnostics, ...)`` turns a list of :class:`~npu_lint.core.diagnostics.Diagnostic` into the text
of one output format. Each formatter lives in its own module and is imported only when it is used.

This module also holds the helpers the formatters share: path display relative to the project root, a
per-render cache of file texts (diagnostics do not carry the file text, but edit offsets and multi-line
ranges need it), offset -> position conversion and UTF-16 column conversion.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Protocol

from npu_lint.core.diagnostics import Diagnostic, Fix, display_path
from npu_lint.core.source import DecodeError, SourceFile, decode_source

FORMATS: tuple[str, ...] = ("text", "concise", "json", "json-lines", "sarif", "github", "junit")

# format name -> (module under npu_lint.report, function name)
_FORMATTERS: dict[str, tuple[str, str]] = {
    "text": ("text", "render_text"),
    "concise": ("text", "render_concise"),
    "json": ("jsonfmt", "render_json"),
    "json-lines": ("jsonfmt", "render_json_lines"),
    "sarif": ("sarif", "render_sarif"),
    "github": ("github", "render_github"),
    "junit": ("junit", "render_junit"),
}


class RuleInfo(Protocol):
    """What a formatter needs to know about a rule; rule classes provide these as class attributes."""

    code: str  # e.g. "NPU001"
    name: str  # kebab-case name, e.g. "cuda-device-call"
    summary: str  # one line
    why: str  # rationale, markdown
    fix_safety: str  # "safe", "unsafe", "display" or "none"


def render(
    fmt: str,
    diagnostics: list[Diagnostic],
    *,
    rules: Mapping[str, RuleInfo],
    root: str,
    show_fixes: bool = False,
    unsafe_fixes: bool = False,
    color: bool = False,
) -> str:
    """Render ``diagnostics`` in output format ``fmt`` (one of :data:`FORMATS`).

    ``rules`` maps rule codes to rule classes (at least the codes that occur in ``diagnostics``);
    ``root`` is the project root that paths are shown relative to. ``unsafe_fixes`` makes unsafe fixes count
    as applicable; ``show_fixes`` and ``color`` only affect the ``text`` format (``color`` also ``concise``).
    The result ends with a newline unless it is empty.
    """
    try:
        module_name, func_name = _FORMATTERS[fmt]
    except KeyError:
        raise ValueError(f"unknown output format {fmt!r}; expected one of: {', '.join(FORMATS)}") from None
    module = importlib.import_module(f"{__name__}.{module_name}")
    formatter = getattr(module, func_name)
    ordered = sorted(diagnostics, key=Diagnostic.sort_key)
    ctx = RenderContext(rules=rules, root=root, show_fixes=show_fixes, unsafe_fixes=unsafe_fixes, color=color)
    result: str = formatter(ordered, ctx)
    return result


# --------------------------------------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------------------------------------


def fix_is_applicable(fix: Fix | None, unsafe_fixes: bool) -> bool:
    """Whether ``fix`` would be applied by ``--fix`` (safe fixes; unsafe ones too with ``unsafe_fixes``)."""
    return fix is not None and fix.applies(unsafe_fixes)


def rule_url(code: str) -> str:
    """The documentation page of a rule (same as ``Diagnostic.url``)."""
    from npu_lint import DOCS_URL

    return f"{DOCS_URL}/{code}.md"


def utf16_len(text: str) -> int:
    """Length of ``text`` in UTF-16 code units (characters outside the BMP count twice)."""
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def utf16_column(line_text: str, col: int) -> int:
    """Convert a 0-based code-point column on ``line_text`` to a 0-based UTF-16 column.

    Columns past the end of the line (e.g. a range ending at the line break) keep their overhang.
    """
    if col <= 0:
        return col
    prefix = line_text[:col]
    return utf16_len(prefix) + max(0, col - len(prefix))


class RenderContext:
    """Options of one render call plus the caches shared by its formatters."""

    def __init__(
        self,
        *,
        rules: Mapping[str, RuleInfo],
        root: str,
        show_fixes: bool = False,
        unsafe_fixes: bool = False,
        color: bool = False,
    ) -> None:
        self.rules = rules
        self.root = os.path.abspath(root or ".")
        self.show_fixes = show_fixes
        self.unsafe_fixes = unsafe_fixes
        self.color = color
        self._files: dict[str, SourceFile | None] = {}
        self._rel: dict[str, str | None] = {}  # path -> relpath (a render shows each path many times)

    # paths -----------------------------------------------------------------------------------------------

    def abspath(self, path: str) -> str:
        return os.path.abspath(path)

    def relpath(self, path: str) -> str | None:
        """``path`` relative to the root (native separators), or None when it is not under the root."""
        try:
            return self._rel[path]
        except KeyError:
            rel = self._rel[path] = self._relpath(path)
            return rel

    def _relpath(self, path: str) -> str | None:
        absolute = os.path.abspath(path)
        try:
            if os.path.commonpath([absolute, self.root]) != self.root:
                return None
        except ValueError:  # different drives on Windows
            return None
        return os.path.relpath(absolute, self.root)

    def display_path(self, path: str) -> str:
        """How a path is shown to people: relative to the root when under it, else as given; control characters
        and undecodable bytes escaped (a file name must not drive the terminal)."""
        rel = self.relpath(path)
        return display_path(rel if rel is not None else path)

    def root_uri(self) -> str:
        uri = Path(self.root).as_uri()
        return uri if uri.endswith("/") else uri + "/"

    # file texts ------------------------------------------------------------------------------------------

    def source(self, path: str) -> SourceFile | None:
        """The decoded file (read once per render), or None when it cannot be read."""
        key = os.path.abspath(path)
        if key not in self._files:
            try:
                from npu_lint.core.safeio import read_regular

                data, _ = read_regular(key)
            except OSError:
                self._files[key] = None
            else:
                try:
                    text, encoding = decode_source(data)
                except DecodeError:
                    text, encoding = data.decode("latin-1"), "latin-1"
                self._files[key] = SourceFile(key, text, encoding)
        return self._files[key]

    def line_text(self, diagnostic: Diagnostic, row: int) -> str | None:
        """Line ``row`` of the file: ``source_line`` when it is that line, else read from the file."""
        if row == diagnostic.line and diagnostic.source_line:
            return diagnostic.source_line.rstrip("\r\n")
        src = self.source(diagnostic.path)
        if src is None:
            return None
        return src.line_text(row)

    # rules -----------------------------------------------------------------------------------------------

    def rule(self, code: str) -> RuleInfo | None:
        return self.rules.get(code)

    def rules_for(self, diagnostics: Iterable[Diagnostic]) -> list[str]:
        """Codes to describe: every rule in ``rules`` plus any code only seen in diagnostics, sorted."""
        codes = set(self.rules)
        codes.update(d.code for d in diagnostics)
        return sorted(codes)


__all__ = [
    "FORMATS",
    "RenderContext",
    "RuleInfo",
    "fix_is_applicable",
    "render",
    "rule_url",
    "utf16_column",
    "utf16_len",
]
