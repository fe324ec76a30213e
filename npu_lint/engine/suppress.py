"""Suppressions: `# noqa[: CODES]` on a line, `# npu-lint: noqa[: CODES]` for a file, per-file-ignores.

A directive counts only in a comment token (``tokenize``): `"# noqa"` inside a string literal, or a docstring
line `# npu-lint: noqa`, suppresses nothing. When the file does not tokenize (a syntax error), the line text
is used, as before.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from npu_lint.core.config import Settings
from npu_lint.core.diagnostics import Diagnostic
from npu_lint.core.memo import Bounded
from npu_lint.core.safeio import read_text
from npu_lint.core.source import SourceFile

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*))?", re.IGNORECASE)
_FILE_NOQA = re.compile(
    r"^[ \t]*#[ \t]*npu-lint:[ \t]*noqa(?::[ \t]*(?P<codes>[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*))?[ \t]*$",
    re.MULTILINE | re.IGNORECASE,
)


_NEWLINE = re.compile(r"\r\n|\r|\n")


def _codes_in(text: str | None) -> set[str] | None:
    if not text:
        return None
    return {c.upper() for c in re.split(r"[\s,]+", text) if c}


def comments(text: str, spec: bool = False) -> dict[int, str] | None:
    """1-based line -> the text of the comment token on it (None when the text does not tokenize). In a patch
    ``spec``, the inner lines of a plain multi-line string are code patchgen copies into the generated file
    (``add_post_import_block``): the comments of that code count too (``--add-noqa`` writes them there)."""
    import io
    import tokenize

    out: dict[int, str] = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text, newline="").readline):
            if tok.type == tokenize.COMMENT:
                out[tok.start[0]] = tok.string
            elif spec and tok.type == tokenize.STRING and tok.end[0] - tok.start[0] > 1:
                if not {"f", "b", "r"} & set(tok.string[:3].lower().split(tok.string[-1])[0]):
                    out.update(_code_block_comments(tok.string, tok.start[0]))
    except (tokenize.TokenError, SyntaxError, IndentationError, ValueError):
        return None
    return out


def string_ends(text: str) -> dict[int, int]:
    """1-based line -> the last line of the multi-line string that starts or continues on it (not that last
    line itself). As in ruff, a finding on such a line takes its ``# noqa`` from the line the string ends on:
    no comment can follow code on the others."""
    import io
    import tokenize

    fstring_start = getattr(tokenize, "FSTRING_START", None)
    fstring_end = getattr(tokenize, "FSTRING_END", None)
    out: dict[int, int] = {}
    opened: list[int] = []  # start lines of the f-strings being read (3.12+ tokenizes their parts)
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text, newline="").readline):
            first, last = tok.start[0], tok.end[0]
            if fstring_start is not None and tok.type == fstring_start:
                opened.append(first)
                continue
            if fstring_end is not None and tok.type == fstring_end and opened:
                first = opened.pop()
            elif tok.type != tokenize.STRING:
                continue
            for line in range(first, last):
                out.setdefault(line, last)
    except (tokenize.TokenError, SyntaxError, IndentationError, ValueError):
        return {}
    return out


def _code_block_comments(literal: str, first_line: int) -> dict[int, str]:
    """The comments of the code inside a multi-line string literal, by line of the enclosing file."""
    import io
    import textwrap
    import tokenize

    lines = _NEWLINE.split(literal)[1:-1]  # the inner lines (the opening and closing lines hold the quotes)
    out: dict[int, str] = {}
    try:
        block = textwrap.dedent("\n".join(lines)) + "\n"
        for tok in tokenize.generate_tokens(io.StringIO(block).readline):
            if tok.type == tokenize.COMMENT:
                out[first_line + tok.start[0]] = tok.string
    except (tokenize.TokenError, SyntaxError, IndentationError, ValueError):
        for i, line in enumerate(lines, start=1):  # not code after all: a `#` starts a comment
            if "#" in line:
                out[first_line + i] = line[line.index("#") :]
    return out


def file_suppression(text: str, comment_lines: dict[int, str] | None = None) -> set[str] | None | bool:
    """False: none. True: whole file. A set: codes suppressed for the file. Only a line that is nothing but
    a comment counts (``comment_lines`` from ``comments``; None: the text did not tokenize, lines are used)."""
    for match in _FILE_NOQA.finditer(text):
        if comment_lines is not None:
            line = len(_NEWLINE.findall(text, 0, match.start())) + 1
            comment = comment_lines.get(line)
            if comment is None or comment.strip() != match.group(0).strip():
                continue
        codes = _codes_in(match.group("codes"))
        return True if codes is None else codes
    return False


def noqa_codes(line_text: str) -> set[str] | None | bool:
    """False: no noqa on the line; None: bare noqa (everything); a set: those codes."""
    if "noqa" not in line_text.lower():
        return False
    match = _NOQA.search(line_text)
    if not match:
        return False
    return _codes_in(match.group("codes"))


_SPEC_LINES: Bounded[str, tuple[tuple[int, int], list[str]]] = Bounded(256)  # path -> (its state, lines)


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
            cached = (stamp, read_text(path, limit=8 * 1024 * 1024, errors="replace").splitlines())
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


def line_noqa(src: SourceFile, line: int, comment_lines: dict[int, str] | None) -> set[str] | None | bool:
    """``noqa_codes`` of the comment on ``line`` (of the line text when the file did not tokenize)."""
    if comment_lines is None:
        return noqa_codes(src.line_text(line))
    comment = comment_lines.get(line)
    return False if comment is None else noqa_codes(comment)


def _may_hold_noqa(line: str) -> bool:
    return "noqa" in line.lower() or '"""' in line or "'''" in line or line.rstrip().endswith("\\")


def apply_suppressions(src: SourceFile, diags: list[Diagnostic], ignored: set[str]) -> list[Diagnostic]:
    lowered = src.text.lower() if diags else ""
    # tokenizing a file costs about a third of its parse: done only when a directive may apply, i.e. when a
    # finding's line holds "noqa" (a line without the word has no noqa comment, tokenized or not) or the text
    # holds a file-level directive; otherwise every finding's line answers False either way
    # (or when a finding's line opens a string that continues onto later lines: its noqa sits where it ends)
    need = "noqa" in lowered and (
        ("npu-lint" in lowered and _FILE_NOQA.search(src.text) is not None)
        or any(_may_hold_noqa(src.line_text(d.line)) for d in diags)
    )
    comment_lines = comments(src.text) if need else {}
    # a file-level directive is a real comment; a line's noqa may also sit in a spec's code block
    file_level = file_suppression(src.text, comment_lines) if need and "npu-lint" in lowered else False
    if src.kind.spec and comment_lines:
        comment_lines = comments(src.text, spec=True)
    if file_level is True:
        return []
    if isinstance(file_level, set):
        ignored = ignored | file_level
    out = []
    ends: dict[int, int] | None = None
    for diag in diags:
        if diag.code in ignored:
            continue
        noqa = line_noqa(src, diag.line, comment_lines)
        if noqa is False and comment_lines:  # a line inside a multi-line string: its last line's noqa
            ends = string_ends(src.text) if ends is None else ends
            if diag.line in ends:
                noqa = line_noqa(src, ends[diag.line], comment_lines)
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
        # as ruff: `!pattern` applies to every file the pattern does not match, and an absolute pattern names the
        # files under it (a lone gitignore `!x` or `/abs/x` line silently matched nothing)
        negated = pattern.startswith("!")
        glob = pattern[1:] if negated else pattern
        if os.path.isabs(glob):
            try:
                glob = "/" + Path(glob).resolve().relative_to(root).as_posix()  # anchored at the root
            except ValueError:
                pass  # outside the project: matches no file linted here
        spec = pathspec.GitIgnoreSpec.from_lines([glob])
        if (spec.match_file(rel) or spec.match_file(Path(rel).name)) != negated:
            out |= expand_codes(codes, known, "per-file-ignores")
    return out
