"""Suppressions: `# noqa[: CODES]` on a line, `# npu-lint: noqa[: CODES]` for a file, per-file-ignores."""

from __future__ import annotations

import re
from pathlib import Path

from npu_lint.core.config import Settings
from npu_lint.core.diagnostics import Diagnostic
from npu_lint.core.source import SourceFile

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*))?", re.IGNORECASE)
_FILE_NOQA = re.compile(
    r"^[ \t]*#[ \t]*npu-lint:[ \t]*noqa(?::[ \t]*(?P<codes>[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*))?[ \t]*$",
    re.MULTILINE | re.IGNORECASE,
)


def _codes_in(text: str | None) -> set[str] | None:
    if not text:
        return None
    return {c.upper() for c in re.split(r"[\s,]+", text) if c}


def file_suppression(text: str) -> set[str] | None | bool:
    """False: none. True: whole file. A set: codes suppressed for the file."""
    match = _FILE_NOQA.search(text)
    if not match:
        return False
    codes = _codes_in(match.group("codes"))
    return True if codes is None else codes


def noqa_codes(line_text: str) -> set[str] | None | bool:
    """False: no noqa on the line; None: bare noqa (everything); a set: those codes."""
    if "noqa" not in line_text.lower():
        return False
    match = _NOQA.search(line_text)
    if not match:
        return False
    return _codes_in(match.group("codes"))


_SPEC_LINES: dict[str, tuple[tuple[int, int], list[str]]] = {}


def _origin_line(path: str, line: int) -> str:
    """The text of a spec line a generated finding comes from (read once per file version)."""
    import os

    try:
        st = os.stat(path)
    except OSError:
        return ""
    stamp = (st.st_mtime_ns, st.st_size)
    cached = _SPEC_LINES.get(path)
    if cached is None or cached[0] != stamp:
        if st.st_size > 8 * 1024 * 1024:
            return ""
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                cached = (stamp, fh.read().splitlines())
        except OSError:
            return ""
        _SPEC_LINES[path] = cached
    lines = cached[1]
    return lines[line - 1] if 1 <= line <= len(lines) else ""


def _suppressed_at_origin(diag: Diagnostic) -> bool:
    """A finding in a generated file is suppressed by a noqa comment on the spec line it comes from (where
    ``--add-noqa`` puts it: generated files are never edited)."""
    origin = diag.origin
    if origin is None or not origin.path or origin.line <= 0 or origin.note.startswith("unpatched"):
        return False  # unpatched upstream code: its origin is the spec's config line, shared by everything
    noqa = noqa_codes(_origin_line(origin.path, origin.line))
    return noqa is None or (noqa is not False and diag.code in noqa)


def apply_suppressions(src: SourceFile, diags: list[Diagnostic], ignored: set[str]) -> list[Diagnostic]:
    file_level = file_suppression(src.text) if "npu-lint" in src.text else False
    if file_level is True:
        return []
    if isinstance(file_level, set):
        ignored = ignored | file_level
    out = []
    for diag in diags:
        if diag.code in ignored:
            continue
        noqa = noqa_codes(src.line_text(diag.line))
        if noqa is False:
            if not (diag.origin is not None and _suppressed_at_origin(diag)):
                out.append(diag)
        elif noqa is None or diag.code in noqa:
            continue
        else:
            out.append(diag)
    return out


def per_file_ignored(path: str, settings: Settings, known: list[str]) -> set[str]:
    if not settings.per_file_ignores:
        return set()
    import pathspec

    from npu_lint.core.config import expand_codes

    root = Path(settings.root).resolve()
    try:
        rel = Path(path).resolve().relative_to(root).as_posix()
    except ValueError:
        rel = Path(path).as_posix()
    out: set[str] = set()
    for pattern, codes in settings.per_file_ignores.items():
        spec = pathspec.GitIgnoreSpec.from_lines([pattern])
        if spec.match_file(rel) or spec.match_file(Path(rel).name):
            out |= expand_codes(codes, known, "per-file-ignores")
    return out
