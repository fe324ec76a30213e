"""Repeated fix passes: a fix can enable another in a file beside it (a GPU spec made device-neutral lets its NPU
sibling reuse the patches; a created NPU spec gets its reuses). ``fix_until_stable`` runs ``fix_tree`` again over
what the last pass changed; ``staged_passes`` does the same on a private copy of the tree, so that ``--diff`` shows
what ``--fix`` writes without writing the real tree."""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from collections import Counter
from pathlib import Path

from npu_lint.core.config import Settings
from npu_lint.core.safeio import read_regular
from npu_lint.core.source import decode_source
from npu_lint.engine.fix import TreeFix, fix_tree
from npu_lint.engine.pool import ProjectJob, lint_paths
from npu_lint.engine.write import copy_writable, create_new, staging_ignore, write_atomic
from npu_lint.veomni.project import Project

MAX_TREE_PASSES = (
    4  # a fixed GPU spec, then its NPU sibling's reuses, then what those orphan: chains are short
)


def _under(path: str, root: str) -> bool:
    real, base = os.path.realpath(path), os.path.realpath(root)
    return real == base or real.startswith(base.rstrip(os.sep) + os.sep)


def fix_until_stable(
    first: TreeFix,
    paths: list[str],
    settings: Settings,
    codes: list[str],
    *,
    unsafe: bool,
    jobs: int | None = None,
    force_exclude: bool = False,
) -> TreeFix:
    """Fix again while the last pass changed files. Each pass re-lints, without the cache, the files of the run
    that sit in a directory the last pass changed or created a file in (never a file the user did not name, nor
    one an earlier pass failed to write), at most ``MAX_TREE_PASSES`` passes in all; the passes' counts, created
    files and changes are merged into one ``TreeFix`` (a file changed twice keeps its first text as the old
    one). The findings reported are those of the last pass on the files it re-linted (a check of the result)."""
    from npu_lint.core.discovery import discover
    from npu_lint.veomni.project import load_project

    total = last = first
    for _ in range(MAX_TREE_PASSES - 1):
        touched = {os.path.dirname(os.path.abspath(p)) for p, _old, _new in last.changes}
        if not touched:
            break
        found = discover(paths, settings, force_exclude=force_exclude)
        files = [  # a file a pass failed on (read-only, changed meanwhile) is not tried again; the others are
            f
            for f in found.files
            if any(os.path.abspath(f).startswith(d + os.sep) for d in touched)
            and not any(e.startswith(f + ":") for e in total.errors)
        ]
        if not files:
            break
        project = load_project(paths, settings)  # the tree as the last pass left it (files created)
        job = ProjectJob(files, fix_mode=True)
        diagnostics: list = []
        for res in lint_paths(files, codes, settings, project, None, jobs=jobs, project_job=job):
            diagnostics.extend(res.diagnostics)
        diagnostics.extend(job.diagnostics)
        last = fix_tree(diagnostics, codes, settings, project, unsafe=unsafe, write=True)
        kept = {os.path.abspath(f) for f in files}  # the earlier findings on files this pass did not re-lint
        earlier = [d for d in total.remaining if os.path.abspath(d.path) not in kept]
        last.remaining = [*earlier, *last.remaining]
        # a pass that changes nothing still reports what it found on the files it re-linted: a created NPU spec
        # carries findings of its own (not generated yet), and the summary and exit code are a check's
        total = merge_fixes(total, last)
        if not last.changes:
            break
    return total


def staged_passes(
    first: TreeFix,
    paths: list[str],
    settings: Settings,
    codes: list[str],
    project: Project,
    *,
    unsafe: bool,
    jobs: int | None = None,
    force_exclude: bool = False,
) -> tuple[list[tuple[str, str, str]], bool]:
    """The changes ``fix_until_stable`` would write after an unwritten first pass, and whether they are complete.
    When the first pass changed files of a VeOmni tree, the further passes run on a private copy of that tree (the
    first pass's texts written into it; placed as the tree sits under the configuration's directory, so its
    patterns match as in the tree) and their changes are mapped back; the real tree is never written. Only the
    tree's ``veomni`` package and top-level files are copied (what the project and the tree's ruff configuration
    are read from; never an ancestor, nor the data or checkpoints beside the package). A tree that cannot be
    staged (an installed wheel, a change outside those, a first pass that could not fix a file) keeps the first
    pass's changes, reported as incomplete."""
    if not first.changes or project.root is None:
        return first.changes, True
    tree = os.path.realpath(project.root)
    package = os.path.join(tree, "veomni")
    changed = [os.path.realpath(c[0]) for c in first.changes]
    if (
        first.errors
        or {"site-packages", "dist-packages"} & set(Path(tree).parts)
        or not all(_under(p, tree) for p in map(os.path.realpath, paths))
        or not all(_under(p, package) or os.path.dirname(p) == tree for p in changed)
    ):
        return first.changes, False
    top = Path(tempfile.mkdtemp(prefix="npu-lint-diff-"))  # removed at the end
    root = os.path.realpath(settings.root)
    stage = top / os.path.basename(tree)
    staged_root = settings.root  # no configuration: the root is the working directory, no pattern anchored
    if settings.config_path and _under(root, tree):
        staged_root = os.path.join(stage, os.path.relpath(root, tree))
    elif settings.config_path and _under(tree, root):
        stage = top / "root" / os.path.relpath(tree, root)
        staged_root = str(top / "root")

    def staged(path: str) -> str:
        return os.path.join(stage, os.path.relpath(os.path.realpath(path), tree))

    try:
        shutil.copytree(
            package, stage / "veomni", symlinks=True, ignore=staging_ignore, copy_function=copy_writable
        )
        for entry in os.scandir(tree):
            if entry.is_file(follow_symlinks=False) and not staging_ignore(tree, [entry.name]):
                copy_writable(entry.path, str(stage / entry.name))
        for path, old, new in first.changes:
            if old:
                write_atomic(staged(path), new, decode_source(read_regular(staged(path))[0])[1])
            else:
                create_new(staged(path), new)
        shown = {os.path.normpath(staged(path)): path for path, _old, _new in first.changes}
        staged_settings = dataclasses.replace(settings, root=staged_root)
        staged_first = TreeFix(changes=[(staged(p), old, new) for p, old, new in first.changes])
        total = fix_until_stable(
            staged_first,
            [staged(p) for p in paths],
            staged_settings,
            codes,
            unsafe=unsafe,
            jobs=jobs,
            force_exclude=force_exclude,
        )
        out = []
        # a file only a later pass changed is named as the first pass names its files
        for path, old, new in total.changes:
            real = os.path.join(tree, os.path.relpath(path, stage))
            named = real if os.path.isabs(first.changes[0][0]) else os.path.relpath(real)
            out.append((shown.get(os.path.normpath(path), named), old, new))
        return out, True
    finally:
        shutil.rmtree(top, ignore_errors=True)


def merge_fixes(before: TreeFix, after: TreeFix) -> TreeFix:
    """Two fix passes as one: the later pass's remaining findings, both passes' counts, files and texts."""
    merged = TreeFix(remaining=after.remaining)
    for counts in (before.fixed_counts, after.fixed_counts):
        for path, count in counts.items():
            merged.fixed_counts.setdefault(path, Counter()).update(count)
    merged.dropped = list(dict.fromkeys([*before.dropped, *after.dropped]))  # a pass repeats what it drops
    merged.created = [*before.created, *(p for p in after.created if p not in before.created)]
    merged.errors = list(dict.fromkeys([*before.errors, *after.errors]))
    firsts = {path: old for path, old, _new in before.changes}
    lasts = {path: new for path, _old, new in before.changes}
    for path, old, new in after.changes:
        firsts.setdefault(path, old)
        lasts[path] = new
    merged.changes = [(path, firsts[path], lasts[path]) for path in lasts]
    return merged
