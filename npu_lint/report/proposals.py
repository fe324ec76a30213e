"""Fixes that were not applied, with their reasons: what ``--diff`` prints beside the diff (on stderr).

A display-only proposal (a migration that cannot be done exactly) and an unsafe fix that was not enabled are
never applied, but the user must see them: each distinct fix is printed once, with the findings that carry
it, its reason and, when it has edits, the diff it proposes.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence

from npu_lint.core.diagnostics import Applicability, Diagnostic, Fix, text_hash
from npu_lint.report import RenderContext


def _applied_text(text: str, fix: Fix) -> str:
    parts: list[str] = []
    cursor = 0
    for edit in sorted(set(fix.edits)):
        if edit.start < cursor:
            continue
        parts.append(text[cursor : edit.start])
        parts.append(edit.content)
        cursor = edit.end
    parts.append(text[cursor:])
    return "".join(parts)


def unapplied(diagnostics: Sequence[Diagnostic], unsafe_fixes: bool) -> list[tuple[Fix, list[Diagnostic]]]:
    """Distinct fixes that ``--fix`` would not apply (display-only, or unsafe without ``--unsafe-fixes``), each
    with the findings that carry it, in finding order."""
    groups: dict[tuple[str, int], tuple[Fix, list[Diagnostic]]] = {}
    for d in diagnostics:
        fix = d.fix
        if fix is None or fix.deferred:
            continue
        display = fix.applicability is Applicability.DISPLAY
        hidden_unsafe = fix.applicability is Applicability.UNSAFE and not unsafe_fixes
        if not (display or hidden_unsafe):
            continue
        key = (d.path, id(fix))
        groups.setdefault(key, (fix, []))[1].append(d)
    return list(groups.values())


def render_proposals(
    diagnostics: Sequence[Diagnostic], ctx: RenderContext, texts: Mapping[str, str] | None = None
) -> str:
    """Each fix that was not applied: a header naming its findings and why, then its proposed diff. ``texts``:
    path -> the text the findings were computed on when it is not the file's (``--diff``: after the safe
    fixes, which are shown but not written); a fix's offsets are into that text."""
    out: list[str] = []
    for fix, diags in unapplied(diagnostics, ctx.unsafe_fixes):
        first = diags[0]
        path = ctx.display_path(first.path)
        where = ", ".join(f"{d.code} at {path}:{d.line}:{d.col + 1}" for d in diags[:6])
        if len(diags) > 6:
            where += f", ... ({len(diags)} findings)"
        if fix.applicability is Applicability.DISPLAY:
            kind = "display-only proposal, not applied"
        else:
            kind = "unsafe fix, not applied (enable with `--unsafe-fixes`)"
        out.append(f"npu-lint: {kind}: {fix.title} [{where}]\n")
        if fix.reason:
            out.append(f"  reason: {fix.reason}\n")
        src = ctx.source(first.path)
        text = src.text if src is not None else None
        fixed = (texts or {}).get(first.path)
        # a finding of the fixed text (a file rule's, re-linted), unless its fix names the file's own text
        if fixed is not None and not (fix.basis and text is not None and fix.basis == text_hash(text)):
            text = fixed
        if fix.edits and text is not None:
            new = _applied_text(text, fix)
            rel = path.lstrip("/")
            lines = difflib.unified_diff(
                text.splitlines(keepends=True),
                new.splitlines(keepends=True),
                fromfile=f"a/{rel}",
                tofile=f"b/{rel} (proposed)",
            )
            out.extend(line if line.endswith("\n") else line + "\n" for line in lines)
    return "".join(out)
