"""Fixes: non-overlapping edits, re-parse, re-lint to a bounded fixpoint; never returns unparsable text."""

from __future__ import annotations

import ast
import bisect
import os
import re
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from npu_lint.core.config import Settings
from npu_lint.core.diagnostics import (
    Applicability,
    CreateFile,
    Diagnostic,
    Edit,
    fix_applicable,
    text_hash,
)
from npu_lint.core.imports import orphaned_import_edits
from npu_lint.core.source import DecodeError, SourceFile
from npu_lint.engine.format import fmt_protected_lines, format_touched, long_line_limit
from npu_lint.engine.guard import guard_fixes
from npu_lint.engine.lint import InternalError, lint_source
from npu_lint.engine.write import ConcurrentChange, create_new, write_atomic
from npu_lint.rules.base import PROJECT_REGISTRY
from npu_lint.veomni.patchgen import NPU_SPEC_SUFFIX
from npu_lint.veomni.project import Project

MAX_FIX_PASSES = 10


def _overlaps(a: Edit, b: Edit) -> bool:
    if a == b:
        return False
    if a.start == a.end == b.start == b.end:
        return True  # two different insertions at one point: order would be arbitrary
    return a.start < b.end and b.start < a.end


class _Taken:
    """The edits a pass has taken, sorted by start: "does this edit overlap one of them" in O(log n + k), not
    against every one (a file with thousands of fixes made the pass quadratic)."""

    def __init__(self) -> None:
        self.edits: list[Edit] = []
        self._keys: list[tuple[int, int]] = []

    def overlaps(self, edit: Edit) -> bool:
        lo = bisect.bisect_left(self._keys, (edit.start, -1))
        hi = bisect.bisect_right(self._keys, (edit.end, sys.maxsize))
        if any(_overlaps(edit, t) for t in self.edits[lo:hi]):  # those starting inside it
            return True
        i = (
            lo - 1
        )  # those starting before it: taken edits do not overlap, so their ends grow with their starts
        while i >= 0 and self._keys[i][1] > edit.start:
            if _overlaps(edit, self.edits[i]):
                return True
            i -= 1
        return False

    def add(self, edits: Iterable[Edit]) -> None:
        for edit in edits:
            i = bisect.bisect_right(self._keys, (edit.start, edit.end))
            self._keys.insert(i, (edit.start, edit.end))
            self.edits.insert(i, edit)


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
    except UnicodeEncodeError:  # a lone surrogate (an editor buffer): the parser reads it as U+FFFD
        from npu_lint.engine.lint import without_surrogates

        return parses(without_surrogates(SourceFile("", text)).text)
    except (SyntaxError, RecursionError, MemoryError, ValueError):
        return False
    return True


def remove_orphaned_imports(before: str, current: SourceFile) -> str:
    """``current``'s text without the module-level imports that ``before`` used and the fixes orphaned."""
    edits = orphaned_import_edits(before, current)
    if not edits:
        return current.text
    cleaned = apply_edits(current.text, edits, current.newline)
    return cleaned if parses(cleaned) else current.text


def _format(before: str, after: str, src: SourceFile) -> str:
    """``after`` with the statements that differ from ``before`` formatted (never unparsable text)."""
    formatted = format_touched(before, after, src.path, src.newline)
    return formatted if formatted != after and parses(formatted) else after


@dataclass
class FixOutcome:
    text: str
    applied: int = 0
    applied_codes: dict[str, int] = field(default_factory=dict)
    dropped: list[str] = field(
        default_factory=list
    )  # fixes whose result did not parse (rendered by ``_placed``)
    creates: list[CreateFile] = field(default_factory=list)
    remaining: list[Diagnostic] = field(default_factory=list)
    held: list[tuple[Diagnostic, str]] = field(default_factory=list)  # (finding, why its fix was dropped)


def _placed(path: str, held: list[tuple[Diagnostic, str]], remaining: list[Diagnostic]) -> list[str]:
    """One line per dropped fix, at the line its finding has in the text written: a finding is seen in the pass
    that drops its fix, and the fixes that land after it move its line (the remaining findings are reported at
    the new one)."""
    after: dict[tuple[str, str, str], list[Diagnostic]] = {}
    for diag in remaining:
        after.setdefault(_fix_id(diag), []).append(diag)
    lines = []
    for diag, reason in held:
        same = after.get(_fix_id(diag))
        where = same.pop(0) if same else diag
        lines.append(f"{path}:{where.line}:{where.col + 1}: {diag.code} {reason}")
    return lines


def _fix_id(diag: Diagnostic) -> tuple[str, str, str]:
    return (diag.code, diag.fix.title if diag.fix else "", diag.source_line.strip())


def _long_protected(text: str, protected: set[int], limit: int) -> int:
    """How many of the ``protected`` lines of ``text`` are longer than ``limit`` (tabs as 4 columns)."""
    lines = re.split(r"\r\n|\r|\n", text)
    return sum(1 for n in protected if 0 < n <= len(lines) and len(lines[n - 1].expandtabs(4)) > limit)


def _fmt_protected_fits(
    candidates: list[Diagnostic],
    text: str,
    path: str,
    newline: str,
    rejected: set[tuple[str, str, str]],
    outcome: FixOutcome,
) -> list[Diagnostic]:
    """``candidates`` without the fixes that would make a line ruff format leaves alone (``# fmt: skip``,
    ``# fmt: off``) longer than the tree's E501 limit: nothing would wrap it and the tree's ``ruff check``
    would fail. Those are dropped with the reason."""
    protected = fmt_protected_lines(text)
    if not protected:
        return candidates
    limit = long_line_limit(path)
    if limit is None:
        return candidates
    starts = [0]
    for match in re.finditer(r"\r\n|\r|\n", text):
        starts.append(match.end())
    before = _long_protected(text, protected, limit)
    kept = []
    for diag in candidates:
        edits = diag.fix.edits  # type: ignore[union-attr]
        lines = {bisect.bisect_right(starts, e.start) for e in edits}
        if not lines & protected:
            kept.append(diag)
            continue
        attempt = apply_edits(text, edits, newline)
        if _long_protected(attempt, fmt_protected_lines(attempt), limit) <= before:
            kept.append(diag)
            continue
        rejected.add(_fix_id(diag))
        outcome.held.append(
            (
                diag,
                "fix dropped: the line is under `# fmt: skip` or `# fmt: off` and would be longer than the "
                f"tree's line length ({limit}); nothing would wrap it",
            )
        )
    return kept


def fix_source(
    src: SourceFile,
    codes: list[str],
    settings: Settings,
    project: Project | None = None,
    unsafe: bool = False,
    format: bool = False,
) -> FixOutcome:
    """Apply fixes to a fixpoint (bounded). Never returns text that does not parse (if the input parsed).

    ``format``: the statements the fixes touched are then formatted under the tree's ruff configuration
    (``engine.format``; what ``fix_tree`` and ``--stdin-filename --fix`` do)."""
    text = src.text
    newline = src.newline
    outcome = FixOutcome(text)
    rejected: set[tuple[str, str, str]] = set()
    created: dict[str, CreateFile] = {}
    current = src
    diags = lint_source(current, codes, settings, project, fix_mode=True)
    for _ in range(MAX_FIX_PASSES):
        candidates = [d for d in diags if fix_applicable(d.fix, unsafe) and _fix_id(d) not in rejected]
        candidates = _fmt_protected_fits(candidates, text, src.path, newline, rejected, outcome)
        if not candidates:
            break
        accepted: list[Diagnostic] = []
        taken = _Taken()
        for diag in sorted(
            candidates, key=lambda d: (min((e.start for e in d.fix.edits), default=0), d.code)
        ):
            edits = diag.fix.edits  # type: ignore[union-attr]
            if any(taken.overlaps(e) for e in edits):
                continue  # left for the next pass
            accepted.append(diag)
            taken.add(edits)
        new_text = apply_edits(text, taken.edits, newline)
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
                outcome.held.append((diag, "fix dropped: result would not parse"))
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
    if text != src.text:
        cleaned = remove_orphaned_imports(src.text, current)
        if cleaned != text:
            text = cleaned
            current = SourceFile(src.path, text, src.encoding, src.kind)
            diags = lint_source(current, codes, settings, project, fix_mode=True)
    if format and text != src.text:
        formatted = _format(src.text, text, src)
        if formatted != text:
            text = formatted
            current = SourceFile(src.path, text, src.encoding, src.kind)
            diags = lint_source(current, codes, settings, project, fix_mode=True)
    outcome.text = text
    outcome.creates = list(created.values())
    outcome.remaining = diags
    outcome.dropped = _placed(src.path, outcome.held, diags)
    return outcome


@dataclass
class TreeFix:
    """What ``fix_tree`` did: per-file fix counts, created files, the (path, old, new) texts it changed (written
    unless asked not to), fixes dropped because their result would not parse or their file changed, files that
    could not be fixed (one line each: the other files are still fixed), and the findings that remain."""

    remaining: list[Diagnostic] = field(default_factory=list)
    fixed_counts: dict[str, Counter[str]] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    changes: list[tuple[str, str, str]] = field(default_factory=list)  # (path, old text, new text); "" = new
    errors: list[str] = field(default_factory=list)  # per-file failures (exit code 2)


def is_project_code(code: str) -> bool:
    """Whether ``code`` is a project rule's (computed over the whole tree, not one file)."""
    return code in PROJECT_REGISTRY


def _inside(path: str, root: str) -> bool:
    real, base = os.path.realpath(path), os.path.realpath(root)
    return real == base or real.startswith(base.rstrip(os.sep) + os.sep)


def _linked_component(path: str, roots: tuple[str, ...]) -> str | None:
    """The first symbolic link among the directories between a root that textually holds ``path`` and ``path``
    itself (a package directory linked out of the tree), or None. Every root is walked, and the VeOmni tree that
    textually holds ``path`` is one of them, whatever directory the run started from. A link above the roots is
    the user's own way to reach the project and is not looked at."""
    from npu_lint.veomni.patchgen import veomni_root_of

    target = os.path.abspath(path)
    tree = veomni_root_of(target)
    for root in (*roots, *((tree,) if tree else ())):
        base = os.path.abspath(root)
        if target == base or not target.startswith(base.rstrip(os.sep) + os.sep):
            continue
        current = base
        for part in os.path.relpath(target, base).split(os.sep):
            current = os.path.join(current, part)
            if os.path.islink(current):
                return current
    return None


def _without_orphan_switches(
    diagnostics: list[Diagnostic], settings: Settings, unsafe: bool
) -> list[Diagnostic]:
    """NPU502's `__init__` switch imports the `_npu` module NPU501's sibling spec will generate; when the package
    has no NPU spec and this run, with NPU501 selected, creates none (NPU501 suppressed by `# noqa` there, or
    its creation refused: through a link, outside the project), the switch is shown, not applied. A run that
    selects NPU502 without NPU501 asks for the switch alone, and gets it (its reason says what to generate)."""
    switches = {
        id(d)
        for d in diagnostics
        if d.code == "NPU502" and d.fix is not None and fix_applicable(d.fix, unsafe)
    }
    if not switches:
        return diagnostics
    pending = {
        os.path.dirname(os.path.abspath(c.path))
        for d in diagnostics
        if d.fix is not None and fix_applicable(d.fix, unsafe)
        for c in d.fix.creates
        if c.path.endswith(NPU_SPEC_SUFFIX)
        and (_inside(c.path, settings.root) or _inside(c.path, os.path.dirname(d.path) or "."))
        and _linked_component(c.path, (str(settings.root), os.path.dirname(d.path) or ".")) is None
    }
    out: list[Diagnostic] = []
    for diag in diagnostics:
        if id(diag) in switches:
            package = os.path.dirname(os.path.abspath(diag.path))
            try:
                has_spec = any(n.endswith(NPU_SPEC_SUFFIX) for n in os.listdir(package))
                generated = os.path.join(package, "generated")
                if not has_spec and os.path.isdir(
                    generated
                ):  # the module is there already: nothing is orphaned
                    has_spec = any(n.endswith("_npu.py") for n in os.listdir(generated))
            except OSError:
                has_spec = True
            if not has_spec and package not in pending and diag.fix is not None:
                reason = (
                    "not applied: the package has no NPU spec and this run creates none (NPU501 suppressed by "
                    "`# noqa`, or its file could not be created): the switch would import a module nothing "
                    "generates"
                )
                diag = diag.replace(fix=replace(diag.fix, applicability=Applicability.DISPLAY, reason=reason))
        out.append(diag)
    return out


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

    Each file is read once, at fix time, and every fix applied to it is computed on that text: file-rule fixes
    are recomputed by re-linting it (cached or earlier edits are never applied), and project-rule fixes
    (computed over the whole tree) are applied, once, only if their ``basis`` is the hash of that text
    (otherwise they are skipped with a message). The write happens only if the file still has the content
    that was read (``write_atomic(expect=...)``): a concurrent save wins and is reported. One file's failure
    is reported in ``errors`` and the other files are still fixed. Created files are written (or only
    reported when ``write`` is false) before the files that will import them, and only inside the project.
    ``sources`` gives the text of some paths (an editor's buffers): those are fixed but never written."""
    out = TreeFix()
    if "NPU501" in codes:  # NPU501 runs, yet may create no spec for a package (noqa, refused creation)
        diagnostics = _without_orphan_switches(diagnostics, settings, unsafe)
    by_path: dict[str, list[Diagnostic]] = {}
    for diag in diagnostics:
        by_path.setdefault(diag.path, []).append(diag)
    for path in sorted(by_path):
        diags = by_path[path]
        # a deferred fix's applicability is known once built (in fix mode): its file is processed
        if not any(fix_applicable(d.fix, unsafe) or (d.fix is not None and d.fix.deferred) for d in diags):
            out.remaining.extend(diags)
            continue
        try:
            _fix_one(path, diags, codes, settings, project, unsafe, write, out, (sources or {}).get(path))
        except ConcurrentChange as exc:
            out.errors.append(str(exc))
            out.remaining.extend(diags)
        except OSError as exc:
            out.errors.append(f"{path}: cannot fix: {exc.strerror or exc}")
            out.remaining.extend(diags)
        except (DecodeError, InternalError) as exc:
            out.errors.append(f"{path}: cannot fix: {exc}")
            out.remaining.extend(diags)
    return out


def _follow_lines(diags: list[Diagnostic], before: SourceFile, after: SourceFile) -> list[Diagnostic]:
    """``diags`` (project findings computed on ``before``, left unfixed) at the lines their text has in
    ``after``, the file as the fixes left it: a finding on a line the fixes did not change moves with it (an
    import added above it, a copied patch removed); one on a changed line keeps its number."""
    import difflib

    if not diags:
        return diags
    moved: dict[int, int] = {}
    matcher = difflib.SequenceMatcher(None, before.lines, after.lines, autojunk=False)
    for tag, i1, i2, j1, _j2 in matcher.get_opcodes():
        if tag == "equal":
            moved.update((i1 + k + 1, j1 + k + 1) for k in range(i2 - i1))
    out = []
    for diag in diags:
        line = moved.get(diag.line, diag.line)
        end = moved.get(diag.end_line, diag.end_line + line - diag.line)
        out.append(diag if line == diag.line else replace(diag, line=line, end_line=end))
    return out


def _fix_one(
    path: str,
    diags: list[Diagnostic],
    codes: list[str],
    settings: Settings,
    project: Project | None,
    unsafe: bool,
    write: bool,
    out: TreeFix,
    buffer: SourceFile | None,
) -> None:
    from npu_lint.engine.lint import read_snapshot

    if buffer is not None:
        src, snapshot = buffer, None
        write = False
    else:
        src, snapshot = read_snapshot(path)  # the fix-time read: every edit applies to this text
    basis = text_hash(src.text)
    counts: Counter[str] = Counter()
    text = src.text
    creates: list[CreateFile] = []
    taken: list[Edit] = []
    applied: list[Diagnostic] = []  # the project fixes taken (a refused creation puts its finding back)
    held: list[tuple[Diagnostic, str]] = []  # project fixes dropped, with why
    project_diags = [d for d in diags if is_project_code(d.code)]
    if project_diags and project is not None:  # the fix invariant, whatever mode computed them
        project_diags = guard_fixes(path, src.text, None, project_diags, project)
    for diag in project_diags:
        fix = diag.fix
        if fix is None or not fix_applicable(fix, unsafe):
            out.remaining.append(diag)
            continue
        edits = list(fix.edits)
        if edits and fix.basis != basis:
            out.dropped.append(
                f"{path}:{diag.line}:{diag.col + 1}: {diag.code} fix skipped: the file changed after it was "
                "linted (run again)"
            )
            out.remaining.append(diag)
            continue
        if any(e.start < t.end and t.start < e.end for e in edits for t in taken):
            out.remaining.append(diag)
            continue
        attempt = apply_edits(src.text, [*taken, *edits], src.newline)
        if not parses(attempt):
            held.append((diag, "fix dropped: result would not parse"))
            out.remaining.append(diag)
            continue
        unfit = FixOutcome(src.text)  # an edit under `# fmt: skip`/`# fmt: off` too long for the tree's E501
        if not _fmt_protected_fits([diag], src.text, path, src.newline, set(), unfit):
            held.extend(unfit.held)
            out.remaining.append(diag)
            continue
        taken.extend(edits)
        text = attempt
        creates.extend(fix.creates)
        counts[diag.code] += 1
        applied.append(diag)
    current = SourceFile(path, text, src.encoding, src.kind)
    outcome = fix_source(current, codes, settings, project, unsafe=unsafe)
    if text != src.text:  # imports the project fixes orphaned (NPU504 removes a copied patch's code)
        fixed = SourceFile(path, outcome.text, src.encoding, src.kind)
        outcome.text = remove_orphaned_imports(src.text, fixed)
    if outcome.text != src.text:  # the statements every fix touched, formatted as the tree's ruff would
        formatted = _format(src.text, outcome.text, src)
        if formatted != outcome.text:
            outcome.text = formatted
            outcome.remaining = lint_source(
                SourceFile(path, formatted, src.encoding, src.kind), codes, settings, project, fix_mode=True
            )
    out.dropped.extend(_placed(path, [*held, *outcome.held], outcome.remaining))  # after the formatting
    out.remaining.extend(outcome.remaining)
    if (
        outcome.text != src.text
    ):  # the project findings left were computed on the text read: follow their lines
        kept = [d for d in out.remaining if d.path == path and is_project_code(d.code)]
        moved = _follow_lines(kept, src, SourceFile(path, outcome.text, src.encoding, src.kind))
        swap = {id(a): b for a, b in zip(kept, moved, strict=True)}
        out.remaining = [swap.get(id(d), d) for d in out.remaining]
    counts.update(outcome.applied_codes)
    creates.extend(outcome.creates)
    create_failed = False
    refused: set[str] = set()
    for create in creates:
        if create.path in out.created:
            continue
        if os.path.lexists(create.path):
            if os.path.isfile(create.path) and not os.path.islink(create.path):
                continue  # made meanwhile (or by another fix): it stands, nothing to create
            # a dangling symlink, a directory, a FIFO: nothing can be created there, and the fix is not applied
            what = "a symbolic link" if os.path.islink(create.path) else "not a regular file"
            out.errors.append(f"{create.path}: not created: the name exists and is {what}")
            create_failed = True
            refused.add(create.path)
            continue
        if not _inside(create.path, settings.root) and not _inside(create.path, os.path.dirname(path) or "."):
            out.errors.append(f"{create.path}: not created: outside the project ({settings.root})")
            create_failed = True
            refused.add(create.path)
            continue
        linked = _linked_component(create.path, (str(settings.root), os.path.dirname(path) or "."))
        if linked is not None:  # the file would land in the link's target, wherever that is
            out.errors.append(
                f"{create.path}: not created: {linked} is a symbolic link (--fix creates files only inside "
                "the project, never through a link)"
            )
            create_failed = True
            refused.add(create.path)
            continue
        if write:
            Path(create.path).parent.mkdir(parents=True, exist_ok=True)
            try:
                create_new(create.path, create.content, "utf-8")  # never replaces a file made meanwhile
            except FileExistsError:
                out.errors.append(f"{create.path}: not created: a file appeared there meanwhile")
                create_failed = True
                continue
        out.changes.append((create.path, "", create.content))
        out.created.append(create.path)
    for diag in applied:  # a fix whose file was not created is not applied: its finding remains
        if diag.fix is not None and any(c.path in refused for c in diag.fix.creates):
            out.remaining.append(diag)
            counts[diag.code] -= 1
    counts = +counts
    if outcome.text != src.text:
        if write:  # counted only once written (a concurrent save or an unwritable file raises first)
            write_atomic(path, outcome.text, src.encoding, expect=snapshot)
        out.fixed_counts[path] = counts
        out.changes.append((path, src.text, outcome.text))
    elif counts and not create_failed:
        out.fixed_counts[path] = counts
