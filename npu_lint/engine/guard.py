"""The fix invariant: no fix adds an import of a module or name that the tree does not define.

Applied by the engine to every built fix (file rules in ``engine.lint.check_source``, project rules in
``engine.pool.project_diagnostics``): the fix's edits are applied to the file's text, the ``veomni`` imports
of the result (``from veomni... import X``, relative imports, a spec's ``add_import`` calls and its
post-import blocks; ``npu_lint.veomni.imports.veomni_imports``) are compared with the file's own, and every
added one, and every one in a file the fix creates, is asked of the profile
(``ApiProfile.import_problem``). A fix with an import the tree cannot resolve becomes display-only, with the
reason, so ``--fix`` never writes it and editors show it as a proposal.
"""

from __future__ import annotations

import ast
import dataclasses

from npu_lint.core.diagnostics import Applicability, Diagnostic, Edit, Fix
from npu_lint.veomni.imports import veomni_imports
from npu_lint.veomni.project import Project

_MARKERS = ("import", "veomni")


def _apply(text: str, edits: tuple[Edit, ...]) -> str | None:
    out: list[str] = []
    pos = 0
    for edit in sorted(set(edits), key=lambda e: (e.start, e.end)):
        if edit.start < pos:
            return None
        out.append(text[pos : edit.start])
        out.append(edit.content)
        pos = edit.end
    out.append(text[pos:])
    return "".join(out)


def _edit_may_import(text: str, edit: Edit, memo: dict[object, object] | None = None) -> bool:
    """Cheap pre-check: an edit whose text, or whose line in the file, mentions an import (only such edits can
    add a ``veomni`` import: a statement, an ``add_import`` call, a post-import block line). With ``memo``
    (one per file) the newlines and ``import`` words are located once, so many edits on one long line cost
    a bisection each, not a scan of the line each (20,000 findings on a 600 KB line: 34 s before)."""
    if not edit.content.strip():
        return False  # a deletion adds no import
    if any(m in edit.content for m in _MARKERS):
        return True
    if memo is None:
        start = text.rfind("\n", 0, edit.start) + 1
        end = text.find("\n", edit.end)
        return "import" in text[start : end if end >= 0 else len(text)]
    import bisect
    import re

    marks = memo.get("import-marks")
    if marks is None:
        marks = memo["import-marks"] = (
            [m.start() for m in re.finditer("\n", text)],
            [m.start() for m in re.finditer("import", text)],
        )
    newlines, words = marks  # type: ignore[misc]
    i = bisect.bisect_left(newlines, edit.start)
    start = newlines[i - 1] + 1 if i > 0 else 0
    j = bisect.bisect_left(newlines, edit.end)
    end = newlines[j] if j < len(newlines) else len(text)
    k = bisect.bisect_left(words, start)
    return k < len(words) and words[k] + len("import") <= end


def import_problem(
    path: str,
    text: str,
    tree: ast.Module | None,
    fix: Fix,
    project: Project,
    _own: dict[object, set[tuple[str, str]]] | None = None,
) -> str | None:
    """Why ``fix`` would add an import the tree does not define (None when every added import resolves).
    ``_own`` holds the file's own ``veomni_imports`` once computed (``guard_fixes`` shares it between fixes)."""
    api = project.api
    for module, name in sorted(added_imports(path, text, tree, fix, _own)):
        problem = api.import_problem(module, name)
        if problem is not None:
            return problem
    return None


def added_imports(
    path: str,
    text: str,
    tree: ast.Module | None,
    fix: Fix,
    _own: dict[object, set[tuple[str, str]]] | None = None,
) -> set[tuple[str, str]]:
    """The ``(module, name)`` pairs of ``veomni`` imports that ``fix`` adds to the file or writes into the files
    it creates."""
    added: set[tuple[str, str]] = set()
    # only the edits that can add an import are applied and parsed; fixes that share them (the same import
    # added by many findings of one file) share the answer, so the check stays linear in the fixes
    relevant = frozenset(e for e in fix.edits if _edit_may_import(text, e, _own))  # type: ignore[arg-type]
    memo = _own if _own is not None else {}
    if relevant:
        key = ("added", relevant)
        if key in memo:
            added |= memo[key]  # type: ignore[arg-type]
        else:
            found: set[tuple[str, str]] = set()
            new = _apply(text, tuple(relevant))
            if new is not None:
                try:
                    new_tree = ast.parse(new)
                except (SyntaxError, ValueError, RecursionError, MemoryError):
                    new_tree = None  # the engine drops fixes whose result does not parse
                if new_tree is not None:
                    own = memo.get("own")
                    if own is None:
                        if tree is None:
                            try:
                                tree = ast.parse(text)
                            except (SyntaxError, ValueError, RecursionError, MemoryError):
                                tree = ast.Module(body=[], type_ignores=[])
                        own = memo["own"] = veomni_imports(tree, path)
                    found = veomni_imports(new_tree, path) - own  # type: ignore[operator]
            memo[key] = found  # type: ignore[index]
            added |= found
    for create in fix.creates:
        try:
            added |= veomni_imports(ast.parse(create.content), create.path)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
    return added


def _outside_tree_reason(
    path: str, text: str, tree: ast.Module | None, fix: Fix, project: Project, own: dict[object, object]
) -> str | None:
    """Outside any VeOmni tree there is no tree to check an added ``veomni`` import against (the names come from the
    built-in catalog of the chosen generation): such a fix is never safe. The reason, or None."""
    api = project.api
    if api.index is not None or not project.outside_tree(path):
        return None
    added = added_imports(path, text, tree, fix, own)  # type: ignore[arg-type]
    if not added:
        return None
    module, name = sorted(added)[0]
    what = f"`{name}` from `{module}`" if name else f"`{module}`"
    return (
        f"no VeOmni tree was found, so the import of {what} comes from the built-in {api.generation.value} "
        "catalog: check that the VeOmni you run defines it"
    )


def guard_fixes(
    path: str, text: str, tree: ast.Module | None, diags: list[Diagnostic], project: Project
) -> list[Diagnostic]:
    """``diags`` with every fix that would add an unresolvable import turned display-only (with the reason).
    Fixes shared by several findings are checked once."""
    checked: dict[int, Fix] = {}
    own: dict[object, set[tuple[str, str]]] = {}  # the file's own veomni imports and answers, computed once
    out: list[Diagnostic] = []
    for diag in diags:
        fix = diag.fix
        if fix is None or fix.applicability is Applicability.DISPLAY or not (fix.edits or fix.creates):
            out.append(diag)
            continue
        key = id(fix)
        if key not in checked:
            problem = import_problem(path, text, tree, fix, project, own)
            guarded = fix
            if problem is not None:
                guarded = Fix(
                    fix.title, fix.edits, Applicability.DISPLAY, fix.creates, f"not applied: {problem}"
                )
            elif fix.applicability is Applicability.SAFE:
                reason = _outside_tree_reason(path, text, tree, fix, project, own)  # type: ignore[arg-type]
                if reason is not None:
                    guarded = dataclasses.replace(fix, applicability=Applicability.UNSAFE, reason=reason)
            checked[key] = guarded
        out.append(diag if checked[key] is fix else diag.replace(fix=checked[key]))
    return out
