"""Adopting npu-lint on a tree with existing findings: ``--add-noqa`` and baselines.

``add_noqa`` appends ``# noqa: CODE`` to each line with findings, with ruff's semantics: codes are merged into
an existing ``# noqa: ...`` comment, a bare ``# noqa`` already covers everything, other comments are kept, and
a second run changes nothing (the findings are suppressed by then). A finding whose line ends inside a
multi-line string or with a backslash continuation cannot carry a comment there and is counted as skipped.

A baseline (``--write-baseline FILE``) records each finding as (rule, file relative to the baseline's
directory, fingerprint); ``--baseline FILE`` then reports only findings that are not in it. The fingerprint
hashes the rule code and the whitespace-normalised text of the finding's line and its two neighbours, not the
line number, so a finding keeps matching when code above it moves; identical fingerprints are counted
(a multiset), so a second copy of a recorded finding is new.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tokenize
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from npu_lint.core.diagnostics import Diagnostic, display_path
from npu_lint.core.source import DecodeError, SourceFile
from npu_lint.engine.lint import read_source
from npu_lint.engine.suppress import comments, noqa_codes, string_ends
from npu_lint.engine.write import write_atomic

BASELINE_VERSION = 1
_NOQA_CODES = re.compile(r"#\s*noqa:\s*(?P<codes>[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*)", re.IGNORECASE)


class BaselineError(Exception):
    """A baseline file that cannot be read or has the wrong shape (one line, exit 2)."""


# -- add-noqa -------------------------------------------------------------------------------------------


@dataclass
class NoqaResult:
    added: int = 0  # directives added or extended in files actually written (one per line, as ruff counts)
    files: list[str] = field(default_factory=list)  # files written
    skipped: list[str] = field(default_factory=list)  # "path:line: why"
    errors: list[str] = field(default_factory=list)  # files that could not be written (exit 2; others were)


def _uncommentable_lines(text: str, spec: bool = False) -> set[int]:
    """Lines that end inside a multi-line string or token (a comment there would change the code). In a patch
    spec, the inner lines of a plain multi-line string are code that patchgen copies into the generated file
    (the code blocks of ``add_post_import_block(...)``: the only strings rules read as code), so a comment
    may go there: it lands in the generated file too."""
    out: set[int] = set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.start[0] != tok.end[0] and tok.type not in (tokenize.NL, tokenize.NEWLINE):
                lines = range(tok.start[0], tok.end[0])
                body = tok.string.lstrip("rRuUbBfF")
                prefix = tok.string[: len(tok.string) - len(body)].lower()
                if spec and tok.type == tokenize.STRING and not ({"f", "b", "r"} & set(prefix)):
                    lines = range(tok.start[0], tok.start[0] + 1)  # the opening line stays blocked
                out.update(lines)
    except (tokenize.TokenError, SyntaxError, IndentationError):
        pass
    return out


def _with_codes(line: str, codes: set[str], comment: str | None = None) -> str | None:
    """``line`` (no line ending) carrying ``codes`` in its noqa comment; None when nothing changes. ``comment``
    is the line's comment token ("" none; None: unknown, the line text is read): a ``# noqa`` inside a string
    literal is not a directive."""
    present = noqa_codes(line if comment is None else comment)
    if present is None:
        return None  # a bare noqa comment covers every code already
    if present is False:
        body = line.rstrip()
        return f"{body}  # noqa: {', '.join(sorted(codes))}"
    missing = sorted(codes - present)
    if not missing:
        return None
    start = 0 if comment is None else len(line) - len(comment)
    if start < 0 or line[start:] != (comment if comment is not None else line):
        return None
    match = _NOQA_CODES.search(line, start)
    if match is None:
        return None
    end = match.end("codes")
    return f"{line[:end]}, {', '.join(missing)}{line[end:]}"


_LINE_END = re.compile(r"\r\n|\r|\n")


def _split_keepends(text: str) -> list[tuple[str, str]]:
    """(line, its own line ending) pairs: a file with mixed line endings keeps each line's ending."""
    out = []
    pos = 0
    for match in _LINE_END.finditer(text):
        out.append((text[pos : match.start()], match.group(0)))
        pos = match.end()
    out.append((text[pos:], ""))
    return out


def _inside(path: str, roots: list[str]) -> bool:
    real = os.path.realpath(path)
    return any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def add_noqa(
    diagnostics: Iterable[Diagnostic], digests: dict[str, str] | None = None, roots: Iterable[str] = ()
) -> NoqaResult:
    """Add or extend ``# noqa: CODES`` on every line with findings, with ``--fix``'s care: ``digests`` (path ->
    sha256 of the bytes the findings were computed on) skips a file that changed since it was linted, the write
    happens only over the bytes read here (``write_atomic``'s check), a file whose real path is outside
    ``roots`` (a symlink out of the tree) is never edited, and a file that cannot be written is reported in
    ``errors`` while the others are written. ``added`` counts directives in written files only."""
    from npu_lint.core.diagnostics import display_path
    from npu_lint.engine.lint import read_snapshot
    from npu_lint.engine.write import ConcurrentChange, content_hash

    real_roots = [os.path.realpath(r) for r in roots]
    result = NoqaResult()
    by_path: dict[str, dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
    # one entry per file, however it is spelled: a generated finding's origin may name its spec as
    # ``./pkg/spec.py`` while the spec's own findings say ``pkg/spec.py``; two entries would write the file
    # twice, the second refused as "changed since it was linted" (by the first write)
    spelling: dict[str, str] = {}

    def one(path: str) -> str:
        real = os.path.realpath(path)
        known = spelling.get(real)
        if known is None or (digests and path in digests and known not in digests):
            if known is not None and known != path:
                for line_no, codes in by_path.pop(known, {}).items():
                    by_path[path][line_no] |= codes
            spelling[real] = known = path
        return known

    for diag in diagnostics:
        origin = diag.origin
        if origin is not None and origin.note.startswith("unpatched"):
            result.skipped.append(
                f"{diag.path}:{diag.line}: unpatched upstream code in a generated file (use a baseline)"
            )
            continue
        if origin is not None and origin.path and origin.line > 0:
            # a finding in a generated file: generated files are never edited, the noqa goes on the spec line
            # the finding comes from (suppression reads it there)
            by_path[one(origin.path)][origin.line].add(diag.code)
        else:
            by_path[one(diag.path)][diag.line].add(diag.code)
    for path in sorted(by_path):
        shown = display_path(path)
        if real_roots and not _inside(path, real_roots):
            result.skipped.append(f"{shown}: outside the linted tree (a symbolic link); not edited")
            continue
        try:
            src, snapshot = read_snapshot(path)
        except (OSError, DecodeError) as exc:
            result.skipped.append(f"{shown}: cannot read: {getattr(exc, 'strerror', None) or exc}")
            continue
        if digests and path in digests and digests[path] and content_hash(snapshot[0]) != digests[path]:
            result.skipped.append(f"{shown}: changed since it was linted; run --add-noqa again")
            continue
        if src.kind.generated:
            result.skipped.append(f"{shown}: generated file (suppress in the spec, or regenerate)")
            continue
        lines = _split_keepends(src.text)
        blocked = _uncommentable_lines(src.text, spec=src.kind.spec)
        comment_lines = comments(src.text, spec=src.kind.spec)
        added = 0
        ends = string_ends(src.text) if blocked else {}
        targets: dict[int, set[str]] = defaultdict(set)
        for line_no, codes in by_path[path].items():
            # a line a multi-line string starts or continues on: the noqa goes where the string ends, where
            # suppression (and ruff) reads it
            targets[ends[line_no] if line_no in blocked and line_no in ends else line_no] |= codes
        for line_no, codes in sorted(targets.items()):
            if line_no < 1 or line_no > len(lines):
                continue
            text, ending = lines[line_no - 1]
            if line_no in blocked or text.rstrip().endswith("\\"):
                result.skipped.append(f"{shown}:{line_no}: the line continues (string or backslash)")
                continue
            new = _with_codes(text, codes, None if comment_lines is None else comment_lines.get(line_no, ""))
            if new is not None and new != text:
                lines[line_no - 1] = (new, ending)
                added += 1
        if not added:
            continue
        try:
            write_atomic(path, "".join(t + e for t, e in lines), src.encoding, expect=snapshot)
        except ConcurrentChange as exc:
            result.skipped.append(display_path(str(exc)))
            continue
        except (OSError, UnicodeEncodeError) as exc:
            result.errors.append(f"{shown}: cannot write: {getattr(exc, 'strerror', None) or exc}")
            continue
        result.added += added
        result.files.append(path)
    return result


# -- baseline -------------------------------------------------------------------------------------------


def _norm(line: str) -> str:
    return " ".join(line.split())


def fingerprint(code: str, lines: list[str], line: int) -> str:
    """Rule + the normalised text of the finding's line and its neighbours (no line number)."""
    window = [_norm(lines[i - 1]) if 1 <= i <= len(lines) else "" for i in (line - 1, line, line + 1)]
    h = hashlib.sha256("\0".join([code, *window]).encode("utf-8", "surrogatepass"))
    return h.hexdigest()[:20]


class _Lines:
    """The lines of each file, read once (the text the findings were computed on)."""

    def __init__(self) -> None:
        self._cache: dict[str, list[str]] = {}

    def get(self, path: str) -> list[str]:
        if path not in self._cache:
            try:
                src: SourceFile = read_source(path)
                self._cache[path] = src.lines  # lines as `ast` numbers them (never str.splitlines)
            except (OSError, DecodeError):
                self._cache[path] = []
        return self._cache[path]


def _rel(path: str, base_dir: str) -> str:
    rel = os.path.relpath(os.path.abspath(path), base_dir)
    return rel.replace(os.sep, "/")


def _keys(diagnostics: Iterable[Diagnostic], base_dir: str) -> list[tuple[Diagnostic, tuple[str, str, str]]]:
    lines = _Lines()
    out = []
    for diag in diagnostics:
        file_lines = lines.get(diag.path)
        if not file_lines and diag.source_line:
            file_lines = [""] * (diag.line - 1) + [diag.source_line]
        out.append(
            (diag, (diag.code, _rel(diag.path, base_dir), fingerprint(diag.code, file_lines, diag.line)))
        )
    return out


def write_baseline(path: str, diagnostics: Iterable[Diagnostic]) -> int:
    base_dir = os.path.dirname(os.path.abspath(path))
    counts: Counter[tuple[str, str, str]] = Counter(key for _, key in _keys(diagnostics, base_dir))
    findings = [
        {"code": code, "path": rel, "fingerprint": fp, "count": n}
        for (code, rel, fp), n in sorted(counts.items(), key=lambda kv: (kv[0][1], kv[0][0], kv[0][2]))
    ]
    data = {"npu-lint-baseline": BASELINE_VERSION, "findings": findings}
    write_atomic(path, json.dumps(data, indent=1) + "\n", "utf-8")
    return sum(counts.values())


def read_baseline(path: str) -> Counter[tuple[str, str, str]]:
    from npu_lint.core.safeio import MAX_SOURCE_BYTES, read_json

    shown = display_path(path)
    try:
        data = read_json(path, limit=MAX_SOURCE_BYTES)
    except FileNotFoundError:
        raise BaselineError(f"baseline file not found: {shown}") from None
    except OSError as exc:
        raise BaselineError(f"cannot read baseline {shown}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise BaselineError(f"baseline {shown} is not JSON: {exc}") from None
    version = data.get("npu-lint-baseline") if isinstance(data, dict) else None
    if type(version) is not int or version != BASELINE_VERSION:  # `true == 1` in Python: a bool is no version
        raise BaselineError(f"{shown} is not an npu-lint baseline (version {BASELINE_VERSION})")
    findings = data.get("findings", [])
    if not isinstance(findings, list):
        raise BaselineError(f"{shown}: `findings` must be a list, got {type(findings).__name__}")
    out: Counter[tuple[str, str, str]] = Counter()
    for i, entry in enumerate(findings):
        fields = (
            (entry.get("code"), entry.get("path"), entry.get("fingerprint"))
            if isinstance(entry, dict)
            else ()
        )
        count = entry.get("count", 1) if isinstance(entry, dict) else None
        if (
            len(fields) != 3
            or not all(isinstance(f, str) for f in fields)
            or not isinstance(count, int)
            or isinstance(count, bool)
            or count < 1
        ):
            raise BaselineError(
                f"{shown}: malformed baseline entry #{i + 1} (needs string code, path, fingerprint "
                "and a positive integer count)"
            )
        out[fields] += count  # type: ignore[index]
    return out


def filter_baseline(path: str, diagnostics: list[Diagnostic]) -> tuple[list[Diagnostic], int]:
    """The findings not in the baseline at ``path``, and how many were matched (hidden)."""
    known = read_baseline(path)
    base_dir = os.path.dirname(os.path.abspath(path))
    kept: list[Diagnostic] = []
    hidden = 0
    for diag, key in _keys(diagnostics, base_dir):
        if known[key] > 0:
            known[key] -= 1
            hidden += 1
        else:
            kept.append(diag)
    return kept, hidden


# -- findings in generated files that one spec line explains ------------------------------------------------


def distinct(diagnostics: list[Diagnostic]) -> tuple[list[Diagnostic], int]:
    """Findings in generated files that trace to one spec line (same rule, same ``origin``) in several generated
    files (a GPU and an NPU module generated from one spec, or a deepcopied spec) are counted once: the findings
    of the first file are kept, those of the other files are folded. Returns the kept findings and how many
    copies were folded (statistics and the audit say "+N generated copies")."""
    primary: dict[tuple[str, str, int], str] = {}
    out = []
    folded = 0
    for diag in diagnostics:
        origin = diag.origin
        if origin is not None and origin.path and origin.line > 0:
            key = (diag.code, origin.path, origin.line)
            owner = primary.setdefault(key, diag.path)
            if owner != diag.path:
                folded += 1
                continue
        out.append(diag)
    return out, folded
