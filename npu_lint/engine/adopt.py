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

from npu_lint.core.diagnostics import Diagnostic
from npu_lint.core.source import DecodeError, SourceFile
from npu_lint.engine.lint import read_source
from npu_lint.engine.suppress import noqa_codes
from npu_lint.engine.write import write_atomic

BASELINE_VERSION = 1
_NOQA_CODES = re.compile(r"#\s*noqa:\s*(?P<codes>[A-Za-z]+[0-9]+(?:[\s,]+[A-Za-z]+[0-9]+)*)", re.IGNORECASE)


class BaselineError(Exception):
    """A baseline file that cannot be read or has the wrong shape (one line, exit 2)."""


# -- add-noqa -------------------------------------------------------------------------------------------


@dataclass
class NoqaResult:
    added: int = 0  # directives added or extended (one per line, as ruff counts)
    files: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "path:line: why"


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


def _with_codes(line: str, codes: set[str]) -> str | None:
    """``line`` (no line ending) carrying ``codes`` in its noqa comment; None when nothing changes."""
    present = noqa_codes(line)
    if present is None:
        return None  # a bare noqa comment covers every code already
    if present is False:
        body = line.rstrip()
        return f"{body}  # noqa: {', '.join(sorted(codes))}"
    missing = sorted(codes - present)
    if not missing:
        return None
    match = _NOQA_CODES.search(line)
    if match is None:
        return None
    end = match.end("codes")
    return f"{line[:end]}, {', '.join(missing)}{line[end:]}"


def add_noqa(diagnostics: Iterable[Diagnostic]) -> NoqaResult:
    """Add or extend ``# noqa: CODES`` on every line with findings (files written atomically)."""
    result = NoqaResult()
    by_path: dict[str, dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
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
            by_path[origin.path][origin.line].add(diag.code)
        else:
            by_path[diag.path][diag.line].add(diag.code)
    for path in sorted(by_path):
        try:
            src = read_source(path)
        except (OSError, DecodeError) as exc:
            result.skipped.append(f"{path}: cannot read: {exc}")
            continue
        if src.kind.generated:
            result.skipped.append(f"{path}: generated file (suppress in the spec, or regenerate)")
            continue
        lines = src.text.split(src.newline) if src.newline != "\n" else src.text.split("\n")
        blocked = _uncommentable_lines(src.text, spec=src.kind.spec)
        changed = False
        for line_no, codes in sorted(by_path[path].items()):
            if line_no < 1 or line_no > len(lines):
                continue
            text = lines[line_no - 1]
            if line_no in blocked or text.rstrip().endswith("\\"):
                result.skipped.append(f"{path}:{line_no}: the line continues (string or backslash)")
                continue
            new = _with_codes(text, codes)
            if new is not None and new != text:
                lines[line_no - 1] = new
                result.added += 1
                changed = True
        if changed:
            write_atomic(path, src.newline.join(lines), src.encoding)
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
                self._cache[path] = src.text.splitlines()
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
    try:
        with open(path, "rb") as fh:
            data = json.loads(fh.read(64 * 1024 * 1024))
    except FileNotFoundError:
        raise BaselineError(f"baseline file not found: {path}") from None
    except OSError as exc:
        raise BaselineError(f"cannot read baseline {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise BaselineError(f"baseline {path} is not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("npu-lint-baseline") != BASELINE_VERSION:
        raise BaselineError(f"{path} is not an npu-lint baseline (version {BASELINE_VERSION})")
    out: Counter[tuple[str, str, str]] = Counter()
    for entry in data.get("findings", []):
        try:
            key = (str(entry["code"]), str(entry["path"]), str(entry["fingerprint"]))
            count = int(entry.get("count", 1))
        except (KeyError, TypeError, ValueError, AttributeError):
            raise BaselineError(f"{path}: malformed baseline entry: {entry!r}"[:200]) from None
        out[key] += max(count, 0)
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
