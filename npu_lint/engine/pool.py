"""Many files: cache first, then a process pool; the project (whole-tree) rules, suppressions applied."""

from __future__ import annotations

import gc
import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from npu_lint.core.astutil import walk_memo
from npu_lint.core.config import Settings
from npu_lint.core.diagnostics import Diagnostic
from npu_lint.core.safeio import read_regular
from npu_lint.core.source import DecodeError, SourceFile
from npu_lint.engine.cache import Cache
from npu_lint.engine.result import FileResult, InternalError
from npu_lint.rules.index import project_codes
from npu_lint.veomni.project import Project

if TYPE_CHECKING:
    from npu_lint.rules.base import ProjectRule

# A warm run (every file a cache hit, the project rules' answer cached) needs none of the lint chain: the engine's
# file pass (``engine.lint``: the walk, the rule base, the analysis modules it imports), the rule registry, the
# fix guard and the suppressions are imported where a file is linted or a project rule runs.

POOL_THRESHOLD = 24  # files; below this a process pool costs more than it saves


_WORKER: dict[str, object] = {}


def _die_with_parent(parent: int) -> None:
    """A worker must not outlive the npu-lint process that started it (it would hold stdout open and hang a
    ``npu-lint ... | consumer`` pipe forever): on Linux the kernel kills it when its parent dies
    (``PR_SET_PDEATHSIG``); everywhere a daemon thread exits it once its parent is gone."""
    import signal
    import sys
    import threading
    import time

    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # the parent died before the check above was in place
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="npu-lint-parent-watch", daemon=True).start()


# objects allocated (net) between two collections while a run pauses the collector. Nearly all of them are
# alive when it runs (the trees the project rules and the upstream reads keep): a serial check of veomni-main's
# `veomni/` (492 files) reaches about 1 M, and the one full collection 1 M triggered there cost 0.95 s of CPU
# (8 % of the check) to free 4,410 objects (0.5 %). 3 M lets a run of that size go without one; a larger
# run still collects, and the garbage it can hold meanwhile stays a small share of what is alive.
COLLECT_OBJECTS = 3_000_000


class _Collector:
    """The cyclic garbage collector paused for a whole run of files; once ``COLLECT_OBJECTS`` objects were
    allocated (net) since the last one, a full collection, after which the survivors are frozen
    (``gc.freeze``: later collections do not traverse them again), so the garbage a run leaves is bounded.
    Pausing it per file (``check_source``) was not enough: every tree, upstream module and spec a run keeps
    was traversed again by the automatic collections between files (on veomni/models they cost a quarter of
    a serial check: 5.4 s of CPU against 3.8 s with the collector off, the same peak memory; a collection
    every 64 files still cost 0.4 s). The collector's state is restored (and the frozen objects unfrozen) by
    ``close``."""

    def __init__(self) -> None:
        self.enabled = gc.isenabled()
        self.count = 0
        gc.disable()

    def tick(self) -> None:
        self.count += 1
        if gc.get_count()[0] >= COLLECT_OBJECTS:
            gc.collect()
            gc.freeze()

    def close(self) -> None:
        # what the run keeps goes to the oldest generation (freeze, then unfreeze: constant time), not to the
        # young one, where the first allocation after ``gc.enable`` would traverse all of it (0.6 s after a
        # serial check of veomni-main's `veomni/`, to collect nothing)
        gc.freeze()
        gc.unfreeze()
        if self.enabled:
            gc.enable()


def _init_worker(codes: list[str], settings: Settings, project: Project | None, parent: int = 0) -> None:
    import signal

    if parent:
        _die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles ^C and shuts the pool down
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _WORKER["args"] = (codes, settings, project)
    _WORKER["gc"] = _Collector()  # for the worker's life (it only lints)
    from npu_lint.rules.base import load_rule_modules

    load_rule_modules()


def _work(path: str) -> FileResult:
    from npu_lint.engine.lint import lint_path

    codes, settings, project = _WORKER["args"]  # type: ignore[misc]
    try:
        return lint_path(path, codes, settings, project)
    finally:
        _WORKER["gc"].tick()  # type: ignore[attr-defined]


@dataclass
class ProjectJob:
    """The project rules of a run handed to ``lint_paths`` (``files``: every linted file, cached ones included).
    In a pool run without fixes, the rules that look at one model package at a time (``ProjectRule.per_package``)
    run in the worker that linted that package's files, on the trees it parsed (each file parsed once per run);
    the others run in this process. ``diagnostics`` and ``errors`` (internal errors, exit 2) are filled in."""

    files: list[str]
    fix_mode: bool = False
    diagnostics: list[Diagnostic] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def package_dir(path: str) -> str:
    """The directory a file's package is read from: its own, or its parent for a file in ``generated/``."""
    directory = os.path.dirname(path)
    if os.path.basename(directory) == "generated":
        directory = os.path.dirname(directory)
    return directory


def _work_group(
    lint: list[str], scope: list[str] | None, rules: list[str]
) -> tuple[list[FileResult], list, list]:
    """One model package in one worker: its files linted (trees kept for the project rules), then the
    per-package project rules over ``scope`` (the package's linted files). Returns results, findings, errors."""
    from npu_lint.engine.lint import lint_path

    codes, settings, project = _WORKER["args"]  # type: ignore[misc]
    out = []
    for path in lint:
        try:
            out.append(lint_path(path, codes, settings, project, share=scope is not None))
        finally:
            _WORKER["gc"].tick()  # type: ignore[attr-defined]
    diags: list[Diagnostic] = []
    errors: list[str] = []
    if scope is not None and rules:
        from npu_lint.rules.base import PROJECT_REGISTRY

        classes = [PROJECT_REGISTRY[c] for c in rules]
        diags = _run_project_rules(classes, project, scope, codes, settings, False, None, errors)
    return out, diags, errors


def _groups(todo: list[str], files: list[str] | None) -> list[tuple[list[str], list[str] | None]]:
    """The pool's tasks: the files of one package directory together (its specs, ``__init__``, generated
    files and modeling files: the project rules find their trees, and the upstream modules they name are read
    by one worker), with the package's linted files as the project rules' scope; largest first."""
    lint: dict[str, list[str]] = {}
    for path in todo:
        lint.setdefault(package_dir(path), []).append(path)
    scope: dict[str, list[str]] = {}
    for path in files or ():
        scope.setdefault(package_dir(path), []).append(path)

    def size(paths: list[str]) -> int:
        total = 0
        for path in paths:
            try:
                total += os.stat(path).st_size
            except OSError:
                pass
        return total

    tasks = [(paths, scope.pop(d, None) if files is not None else None) for d, paths in lint.items()]
    tasks += [([], paths) for paths in scope.values()]  # packages whose files all came from the cache
    tasks.sort(key=lambda t: -size(t[0]))
    return tasks


def lint_paths(
    paths: list[str],
    codes: list[str],
    settings: Settings,
    project: Project | None = None,
    cache: Cache | None = None,
    jobs: int | None = None,
    during: Callable[[], None] | None = None,
    project_job: ProjectJob | None = None,
) -> list[FileResult]:
    """Lint files (cache first, then a process pool for many files). ``during`` runs in this process while
    the pool's workers lint, or after a serial run. ``project_job``: the project rules, run in the same pass
    (see ``ProjectJob``); their result is cached with the files'."""
    results: dict[str, FileResult] = {}
    todo: list[str] = []
    # path -> (cache key, digest of the bytes it was computed from, their stat)
    keys: dict[str, tuple[str, str, os.stat_result]] = {}
    if cache is not None:
        for path in paths:
            hit = cache.lookup_stat(path)  # stat first: an unchanged file is not read
            if hit is not None:
                results[path] = FileResult(path, hit, cached=True)
                continue
            try:
                data, st = read_regular(path)
            except OSError:
                todo.append(path)
                continue
            key = cache.keys[path] = cache.key(path, data)
            hit = cache.lookup_content(path, key, st)
            if hit is None:
                keys[path] = (key, hashlib.sha256(data).hexdigest(), st)
                todo.append(path)
            else:
                results[path] = FileResult(path, hit, cached=True, digest=hashlib.sha256(data).hexdigest())
    else:
        todo = list(paths)
    cpus = os.cpu_count() or 1
    # `--jobs 1000` started 254 workers on 2 CPUs (4x slower than the default): at most 4 per CPU
    workers = cpus if jobs is None else max(1, min(jobs, 4 * cpus))
    pooled = len(todo) >= POOL_THRESHOLD and workers > 1
    here: list[type[ProjectRule]] = []  # project rules run in this process
    there: list[str] = []  # per-package project rules run in the workers
    key = None
    if project_job is not None:
        chosen = project_codes(codes)  # from the rule index: a cache hit imports no rule module
        hit = None
        if chosen and cache is not None and not project_job.fix_mode:
            key = cache.tree_key("project:" + ",".join(chosen))
            hit = cache.get_project(key)
        if hit is not None:
            project_job.diagnostics.extend(hit)
            key = None
        else:
            from npu_lint.rules.base import PROJECT_REGISTRY, load_rule_modules

            load_rule_modules()
            selected = [PROJECT_REGISTRY[c] for c in chosen]
            if pooled and not project_job.fix_mode:
                here = [c for c in selected if not c.per_package]
                there = [c.code for c in selected if c.per_package]
            else:
                here = selected
    share = during is not None or bool(here)

    def run_here() -> None:
        if during is not None:
            during()
        if project_job is not None and here:
            with _paused_collector():
                project_job.diagnostics.extend(
                    _run_project_rules(
                        here, project, project_job.files, codes, settings, project_job.fix_mode, None,
                        project_job.errors,
                    )
                )  # fmt: skip

    if pooled:
        import concurrent.futures
        import multiprocessing

        ctx = multiprocessing.get_context("fork") if hasattr(os, "fork") else None
        pool = concurrent.futures.ProcessPoolExecutor(
            max_workers=workers,
            mp_context=ctx,
            initializer=_init_worker,
            initargs=(codes, settings, project, os.getpid()),
        )
        try:
            tasks = _groups(todo, project_job.files if there and project_job is not None else None)
            futures = [pool.submit(_work_group, lint, scope, there) for lint, scope in tasks]
            run_here()
            for future in futures:
                done, diags, errors = future.result()
                for res in done:
                    results[res.path] = res
                if project_job is not None:
                    project_job.diagnostics.extend(diags)
                    project_job.errors.extend(errors)
        except BaseException:  # ^C, SIGTERM (SystemExit), an error: stop the workers now, do not wait
            for proc in list((getattr(pool, "_processes", None) or {}).values()):
                try:
                    proc.terminate()
                except (OSError, AttributeError):
                    pass
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
    else:
        if todo:
            from npu_lint.engine.lint import lint_path
        collector = _Collector()
        try:
            for path in todo:
                results[path] = lint_path(path, codes, settings, project, share=share)
                collector.tick()
        finally:
            collector.close()
        run_here()
    if key is not None and project_job is not None and not project_job.errors and cache is not None:
        cache.put_project(key, project_job.diagnostics)
    if cache is not None:
        for path, (key, digest, st) in keys.items():
            res = results[path]
            if res.error is None and res.digest == digest:  # the file did not change between the reads
                cache.store(path, key, st, res.diagnostics)
        cache.flush()  # the one index write (the project rules' result, from ``during``, included)
    return [results[p] for p in sorted(results)]


def project_diagnostics(
    project: Project,
    files: list[str],
    codes: list[str],
    settings: Settings,
    fix_mode: bool = False,
    cache: Cache | None = None,
    sources: dict[str, SourceFile] | None = None,
    errors: list[str] | None = None,
) -> list[Diagnostic]:
    """Diagnostics of the project (whole-tree) rules, suppressions applied. A rule that raises is the one
    failure policy's ``internal error in NPUxxx``: appended to ``errors`` (the other rules still run; the
    caller exits 2) or, without ``errors``, raised as ``InternalError``. Cached, like file results,
    under a key covering every linted file's key (content, configuration, project index). ``sources`` gives
    the text to read suppressions from for some paths (an editor's unsaved buffer); others are read from disk.
    Used by the CLI, the audit and the language server."""
    with _paused_collector():
        return _project_diagnostics(project, files, codes, settings, fix_mode, cache, sources, errors)


class _paused_collector:  # noqa: N801 - a context manager
    """The cyclic collector paused, as in ``check_source``: the project rules parse and walk many files while
    the trees they cache stay alive, and the full collections this triggers cost a third of their time;
    whatever is left to collect is collected once the collector runs again."""

    def __enter__(self) -> None:
        self.enabled = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            gc.enable()


def _project_diagnostics(
    project: Project,
    files: list[str],
    codes: list[str],
    settings: Settings,
    fix_mode: bool,
    cache: Cache | None,
    sources: dict[str, SourceFile] | None,
    errors: list[str] | None,
) -> list[Diagnostic]:
    from npu_lint.rules.base import PROJECT_REGISTRY, load_rule_modules

    load_rule_modules()
    rules = [PROJECT_REGISTRY[c] for c in codes if c in PROJECT_REGISTRY]
    if not rules:
        return []
    key = None
    if cache is not None and not fix_mode:
        key = cache.tree_key("project:" + ",".join(c.code for c in rules))
        hit = cache.get_project(key)
        if hit is not None:
            return hit
    own: list[str] = []
    out = _run_project_rules(rules, project, files, codes, settings, fix_mode, sources, own)
    if own:
        key = None  # never cache a partial answer
        if errors is None:
            raise InternalError(own[0])
        errors.extend(own)
    if key is not None:
        cache.put_project(key, out)
    return out


def _run_project_rules(
    rules: list[type[ProjectRule]],
    project: Project,
    files: list[str],
    codes: list[str],
    settings: Settings,
    fix_mode: bool,
    sources: dict[str, SourceFile] | None,
    errors: list[str],
) -> list[Diagnostic]:
    """The findings of ``rules`` over ``files``, suppressions applied; a rule that raises is reported in
    ``errors`` (the one failure policy: ``internal error in NPUxxx``) and the others still run."""
    from npu_lint.engine.guard import guard_fixes
    from npu_lint.engine.lint import read_source
    from npu_lint.engine.suppress import apply_suppressions, per_file_ignored
    from npu_lint.fixers import resolve as resolve_fixer

    out = []
    for cls in rules:
        rule = cls()
        rule.fix_mode = fix_mode
        rule.fixer_lookup = resolve_fixer
        try:
            with walk_memo():  # the helpers' memos live for this rule's run, no longer
                diags = list(rule.check(project, files))
        except Exception as exc:  # one failure policy: name the rule; the run exits 2
            errors.append(f"internal error in {cls.code}: {type(exc).__name__}: {exc}")
            continue
        for diag in diags:
            src = (sources or {}).get(diag.path)
            if src is None:
                try:
                    src = read_source(diag.path)
                except (OSError, DecodeError):
                    out.append(diag)
                    continue
            ignored = per_file_ignored(diag.path, settings, codes)
            kept = apply_suppressions(src, [diag], ignored)
            # the fix invariant (fix mode here; engine.fix.fix_tree checks again before applying, so a plain
            # check does not pay for reading the modules a created file imports)
            out.extend(guard_fixes(diag.path, src.text, None, kept, project) if fix_mode else kept)
    return out
