"""Formatting what a fix touched, and nothing else: the statements of a fixed file whose lines differ from
the text that was read are formatted with ``ruff format --range`` under the target tree's own ruff
configuration (line length, quotes...). A user's unrelated formatting never changes. Applies to every fixer
(the one fix-application path, ``engine.fix``), only when a ruff configuration governs the file (a
``[tool.ruff]`` table, ``ruff.toml`` or ``.ruff.toml`` at or above it): without one the tree has no ruff gate
to keep and its style is not ruff's to choose."""

from __future__ import annotations

import difflib
import os
import re

from npu_lint.core.imports import ruff_style
from npu_lint.core.tools import ruff_format_range, ruff_isort


def touched_lines(before: str, after: str) -> list[tuple[int, int]]:
    """1-based inclusive line ranges of ``after`` that differ from ``before`` (a deletion touches the lines
    around it), merged when they touch or are one line apart."""
    # lines as Python and ruff count them (``\n``, ``\r\n``, ``\r``): ``str.splitlines`` also breaks at form
    # feeds, ``\x1c``-``\x1e``, U+2028..., which would send ruff the range of another statement
    old, new = _NEWLINES.split(before), _NEWLINES.split(after)
    ranges: list[tuple[int, int]] = []
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    for tag, _i1, _i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if tag == "delete":
            first, last = max(j1, 1), min(j1 + 1, len(new))
        else:
            first, last = j1 + 1, j2
        if first > last:
            continue
        if ranges and first <= ranges[-1][1] + 2:
            ranges[-1] = (ranges[-1][0], max(ranges[-1][1], last))
        else:
            ranges.append((first, last))
    return ranges


def governed_by_ruff(path: str) -> bool:
    return ruff_style(os.path.dirname(os.path.abspath(path))).root is not None


def format_touched(before: str, after: str, path: str, newline: str = "\n") -> str:
    """``after`` with the statements that differ from ``before`` formatted as the tree's ruff would format
    them (bottom-up, so earlier line numbers stay valid). Unchanged when ruff or a ruff configuration is
    missing, when ruff fails on a range, or when the text mixes line endings (each line keeps its own). The
    one line-ending style is read from the text (LF, CRLF or CR only); ``newline`` is kept for callers."""
    if before == after or not governed_by_ruff(path):
        return after
    crlf = after.count("\r\n")
    lone_cr, lone_lf = after.count("\r") - crlf, after.count("\n") - crlf
    if sum(1 for n in (crlf, lone_cr, lone_lf) if n) > 1:
        return after  # mixed line endings: ruff would rewrite some of them, and each line keeps its own here
    style = "\r\n" if crlf else "\r" if lone_cr else "\n"  # the file's one style (CR-only files too)
    text = after.replace(style, "\n") if style != "\n" else after
    base = before.replace("\r\n", "\n").replace("\r", "\n") if style != "\n" else before
    if _added_same_module_imports(base, text):  # several fixes each added `from M import x` (NPU504 reuses)
        merged = ruff_isort(text, path)  # the tree's isort merges and orders them as its gate (I001) wants
        if merged is not None and ruff_isort(base, path) == base:  # never re-sorts a file that was not sorted
            text = merged
    for first, last in reversed(touched_lines(base, text)):
        formatted = ruff_format_range(text, path, first, last)
        if formatted is not None:
            text = formatted
    if style != "\n":
        text = text.replace("\n", style)
    return text


_NEWLINES = re.compile(r"\r\n|\r|\n")
_FROM_IMPORT = re.compile(r"^from[ \t]+([\w.]+)[ \t]+import\b", re.M)


def _added_same_module_imports(before: str, after: str) -> bool:
    """Whether the fixes left more than one top-level ``from M import ...`` of one module where the text that
    was read had fewer: independent fixes (each computed on the text that was read) each add their own."""
    from collections import Counter

    old, new = Counter(_FROM_IMPORT.findall(before)), Counter(_FROM_IMPORT.findall(after))
    return any(n > 1 and n > old[module] for module, n in new.items())


_FMT_SKIP = re.compile(r"#\s*fmt:\s*skip\b")
_FMT_OFF = re.compile(r"^\s*#\s*fmt:\s*off\b")
_FMT_ON = re.compile(r"^\s*#\s*fmt:\s*on\b")


def fmt_protected_lines(text: str) -> set[int]:
    """1-based lines ruff format leaves alone: the statement a trailing ``# fmt: skip`` ends, and the lines
    from ``# fmt: off`` to ``# fmt: on`` (or the end of the file). Empty when the text has neither."""
    if "fmt:" not in text:
        return set()
    import ast

    lines = _NEWLINES.split(text)
    out: set[int] = set()
    off: int | None = None
    for number, line in enumerate(lines, start=1):
        if off is None and _FMT_OFF.match(line):
            off = number
        elif off is not None and _FMT_ON.match(line):
            out.update(range(off, number + 1))
            off = None
    if off is not None:
        out.update(range(off, len(lines) + 1))
    skipped = {n for n, line in enumerate(lines, start=1) if _FMT_SKIP.search(line)}
    if skipped:
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return out | skipped
        first: dict[int, int] = {}  # the innermost statement ending on a skipped line (not its enclosing def)
        for node in ast.walk(tree):
            end = getattr(node, "end_lineno", None)
            if isinstance(node, ast.stmt) and end in skipped:
                first[end] = max(first.get(end, 0), node.lineno)
        for end, start in first.items():
            out.update(range(start, end + 1))
        out |= skipped
    return out


def long_line_limit(path: str) -> int | None:
    """The line length the tree's ``ruff check`` enforces (E501) on ``path``, or None when it does not (not
    selected, or ignored for ``path`` by a ``per-file-ignores`` pattern)."""
    style = ruff_style(os.path.dirname(os.path.abspath(path)))
    if style.long_line_limit is None or style.root is None:
        return style.long_line_limit
    if any(_pattern_matches(pattern, path, style.root) for pattern in style.e501_ignored_in):
        return None
    return style.long_line_limit


def _pattern_matches(pattern: str, path: str, root: str) -> bool:
    """Whether a ``per-file-ignores`` pattern applies to ``path``, as ruff matches them: a glob over the path
    relative to the configuration's directory, or over the file name; ``!`` negates."""
    import fnmatch

    negated = pattern.startswith("!")
    glob = pattern[1:] if negated else pattern
    absolute = os.path.abspath(path)
    relative = os.path.relpath(absolute, root).replace(os.sep, "/")
    candidates = {glob, glob[3:]} if glob.startswith("**/") else {glob}
    matched = any(
        fnmatch.fnmatchcase(target, g)
        for g in candidates
        for target in (relative, os.path.basename(absolute), absolute.replace(os.sep, "/"))
    )
    return matched != negated
