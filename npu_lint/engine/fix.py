"""Fixes: non-overlapping edits, re-parse, re-lint to a bounded fixpoint; never returns unparsable text."""

from __future__ import annotations

import ast
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from npu_lint.core.config import Settings
from npu_lint.core.diagnostics import CreateFile, Diagnostic, Edit, Fix
from npu_lint.core.source import SourceFile
from npu_lint.engine.guard import guard_fixes
from npu_lint.engine.lint import lint_source
from npu_lint.rules.base import PROJECT_REGISTRY
from npu_lint.veomni.project import Project

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
    project: Project | None = None,
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


@dataclass
class TreeFix:
    """What ``fix_tree`` did: per-file fix counts, created files, the (path, old, new) texts it changed (written
    unless asked not to), fixes dropped because their result would not parse, and the findings that remain."""

    remaining: list[Diagnostic] = field(default_factory=list)
    fixed_counts: dict[str, Counter[str]] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    changes: list[tuple[str, str, str]] = field(default_factory=list)  # (path, old text, new text); "" = new


def _is_project_code(code: str) -> bool:
    return code in PROJECT_REGISTRY


def fix_tree(
    diagnostics: list[Diagnostic],
    codes: list[str],
    settings: Settings,
    project: Project | None = None,
    unsafe: bool = False,
    write: bool = True,
    sources: dict[str, SourceFile] | None = None,
) -> TreeFix:
    """Fix every file with applicable fixes (the one orchestration for the CLI and the language server).

    Project-rule fixes (computed over the whole tree) are applied first, once, on the file's text; file-rule
    fixes then run to a fixpoint with re-linting. Created files are written (or only reported when ``write``
    is false) before the files that will import them. ``sources`` gives the text of some paths (an editor's
    buffer); the others are read from disk."""
    from npu_lint.engine.lint import read_source
    from npu_lint.engine.write import write_atomic

    out = TreeFix()
    by_path: dict[str, list[Diagnostic]] = {}
    for diag in diagnostics:
        by_path.setdefault(diag.path, []).append(diag)
    for path in sorted(by_path):
        diags = by_path[path]
        if not any(fix_applicable(d.fix, unsafe) for d in diags):
            out.remaining.extend(diags)
            continue
        src = (sources or {}).get(path) or read_source(path)
        counts: Counter[str] = Counter()
        text = src.text
        creates: list[CreateFile] = []
        taken: list[Edit] = []
        project_diags = [d for d in diags if _is_project_code(d.code)]
        if project_diags and project is not None:  # the fix invariant, whatever mode computed them
            project_diags = guard_fixes(path, src.text, None, project_diags, project)
        for diag in project_diags:
            fix = diag.fix
            if fix is None or not fix_applicable(fix, unsafe):
                out.remaining.append(diag)
                continue
            edits = list(fix.edits)
            if any(e.start < t.end and t.start < e.end for e in edits for t in taken):
                out.remaining.append(diag)
                continue
            attempt = apply_edits(src.text, [*taken, *edits], src.newline)
            if not parses(attempt):
                out.dropped.append(
                    f"{path}:{diag.line}:{diag.col + 1}: {diag.code} fix dropped: result would not parse"
                )
                out.remaining.append(diag)
                continue
            taken.extend(edits)
            text = attempt
            creates.extend(fix.creates)
            counts[diag.code] += 1
        current = SourceFile(path, text, src.encoding, src.kind)
        outcome = fix_source(current, codes, settings, project, unsafe=unsafe)
        out.dropped.extend(outcome.dropped)
        out.remaining.extend(outcome.remaining)
        counts.update(outcome.applied_codes)
        creates.extend(outcome.creates)
        for create in creates:
            if os.path.exists(create.path) or create.path in out.created:
                continue
            out.changes.append((create.path, "", create.content))
            if write:
                Path(create.path).parent.mkdir(parents=True, exist_ok=True)
                write_atomic(create.path, create.content, "utf-8")
            out.created.append(create.path)
        if outcome.text != src.text:
            out.fixed_counts[path] = counts
            out.changes.append((path, src.text, outcome.text))
            if write:
                write_atomic(path, outcome.text, src.encoding)
        elif counts:
            out.fixed_counts[path] = counts
    return out
