"""Fixes: non-overlapping edits, re-parse, re-lint to a bounded fixpoint; never returns unparsable text."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass, field

from npu_lint.core.config import Settings
from npu_lint.core.diagnostics import CreateFile, Diagnostic, Edit, Fix
from npu_lint.core.source import SourceFile
from npu_lint.engine.lint import lint_source

MAX_FIX_PASSES = 10


def _overlaps(a: Edit, b: Edit) -> bool:
    if a == b:
        return False
    if a.start == a.end == b.start == b.end:
        return True  # two different insertions at one point: order would be arbitrary
    return a.start < b.end and b.start < a.end


def apply_edits(text: str, edits: Iterable[Edit], newline: str = "\n") -> str:
    unique = sorted(set(edits), key=lambda e: (e.start, e.end))
    out = []
    pos = 0
    for edit in unique:
        if edit.start < pos:
            raise ValueError("overlapping edits")
        out.append(text[pos : edit.start])
        content = edit.content
        if newline != "\n" and "\n" in content:
            content = content.replace("\r\n", "\n").replace("\n", newline)
        out.append(content)
        pos = edit.end
    out.append(text[pos:])
    return "".join(out)


def parses(text: str) -> bool:
    try:
        ast.parse(text)
    except (SyntaxError, RecursionError, MemoryError, ValueError):
        return False
    return True


def fix_applicable(fix: Fix | None, unsafe: bool) -> bool:
    return fix is not None and fix.applies(unsafe)


@dataclass
class FixOutcome:
    text: str
    applied: int = 0
    applied_codes: dict[str, int] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)  # fixes whose result did not parse
    creates: list[CreateFile] = field(default_factory=list)
    remaining: list[Diagnostic] = field(default_factory=list)


def _fix_id(diag: Diagnostic) -> tuple[str, str, str]:
    return (diag.code, diag.fix.title if diag.fix else "", diag.source_line.strip())


def fix_source(
    src: SourceFile,
    codes: list[str],
    settings: Settings,
    project: object | None = None,
    unsafe: bool = False,
) -> FixOutcome:
    """Apply fixes to a fixpoint (bounded). Never returns text that does not parse (if the input parsed)."""
    text = src.text
    newline = src.newline
    outcome = FixOutcome(text)
    rejected: set[tuple[str, str, str]] = set()
    created: dict[str, CreateFile] = {}
    current = src
    diags = lint_source(current, codes, settings, project, fix_mode=True)
    for _ in range(MAX_FIX_PASSES):
        candidates = [d for d in diags if fix_applicable(d.fix, unsafe) and _fix_id(d) not in rejected]
        if not candidates:
            break
        accepted: list[Diagnostic] = []
        taken: list[Edit] = []
        for diag in sorted(
            candidates, key=lambda d: (min((e.start for e in d.fix.edits), default=0), d.code)
        ):
            edits = diag.fix.edits  # type: ignore[union-attr]
            if any(_overlaps(e, t) for e in edits for t in taken):
                continue  # left for the next pass
            accepted.append(diag)
            taken.extend(edits)
        new_text = apply_edits(text, taken, newline)
        if not parses(new_text):
            # find the culprit(s): keep the first fix that parses on its own, retry the rest next pass
            new_text = text
            good: list[Diagnostic] = []
            for diag in accepted:
                attempt = apply_edits(text, diag.fix.edits, newline)  # type: ignore[union-attr]
                if parses(attempt):
                    good.append(diag)
                    new_text = attempt
                    break
                rejected.add(_fix_id(diag))
                outcome.dropped.append(
                    f"{src.path}:{diag.line}:{diag.col + 1}: {diag.code} fix dropped: result would not parse"
                )
            accepted = good
        for diag in accepted:
            for create in diag.fix.creates:  # type: ignore[union-attr]
                created.setdefault(create.path, create)
            outcome.applied += 1
            outcome.applied_codes[diag.code] = outcome.applied_codes.get(diag.code, 0) + 1
        if new_text == text:
            break
        text = new_text
        current = SourceFile(src.path, text, src.encoding, src.kind)
        diags = lint_source(current, codes, settings, project, fix_mode=True)
    else:
        diags = lint_source(current, codes, settings, project, fix_mode=True)
    outcome.text = text
    outcome.creates = list(created.values())
    outcome.remaining = diags
    return outcome
