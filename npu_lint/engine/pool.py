"""Many files: cache first, then a process pool; the project (whole-tree) rules, suppressions applied."""

from __future__ import annotations

import gc
import hashlib
import os
from collections.abc import Callable

from npu_lint.core.config import Settings
from npu_lint.core.diagnostics import Diagnostic
from npu_lint.core.safeio import read_regular
from npu_lint.core.source import DecodeError, SourceFile
from npu_lint.engine.cache import Cache
from npu_lint.engine.guard import guard_fixes
from npu_lint.engine.lint import FileResult, InternalError, lint_path, read_source
from npu_lint.engine.suppress import apply_suppressions, per_file_ignored
from npu_lint.rules.base import PROJECT_REGISTRY, load_rule_modules
from npu_lint.veomni.project import Project

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


COLLECT_OBJECTS = (
    1_000_000  # objects allocated (net) between two collections while a run pauses the collector
)


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
    load_rule_modules()


def _work(path: str) -> FileResult:
    codes, settings, project = _WORKER["args"]  # type: ignore[misc]
    try:
        return lint_path(path, codes, settings, project)
    finally:
        _WORKER["gc"].tick()  # type: ignore[attr-defined]


def lint_paths(
    paths: list[str],
    codes: list[str],
    settings: Settings,
    project: Project | None = None,
    cache: Cache | None = None,
    jobs: int | None = None,
    during: Callable[[], None] | None = None,
) -> list[FileResult]:
    """Lint files (cache first, then a process pool for many files). ``during`` runs in this process while
    the pool's workers lint (the CLI runs the project rules there), or after a serial run."""
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
    workers = jobs if jobs is not None else (os.cpu_count() or 1)
    if len(todo) >= POOL_THRESHOLD and workers > 1:
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
            chunk = max(1, len(todo) // (workers * 4))
            pending = pool.map(_work, todo, chunksize=chunk)  # submits every chunk now
            if during is not None:
                during()
            for res in pending:
                results[res.path] = res
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
        collector = _Collector()
        try:
            for path in todo:
                results[path] = lint_path(path, codes, settings, project, share=during is not None)
                collector.tick()
        finally:
            collector.close()
        if during is not None:
            during()
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
    # the cyclic collector is paused meanwhile, as in ``check_source``: the project rules parse and walk many
    # files while the trees they cache stay alive, and the full collections this triggers cost a third of
    # their time; whatever is left to collect is collected once the collector runs again
    if not gc.isenabled():
        return _project_diagnostics(project, files, codes, settings, fix_mode, cache, sources, errors)
    gc.disable()
    try:
        return _project_diagnostics(project, files, codes, settings, fix_mode, cache, sources, errors)
    finally:
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
    from npu_lint.fixers import resolve as resolve_fixer

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
    out = []
    for cls in rules:
        rule = cls()
        rule.fix_mode = fix_mode
        rule.fixer_lookup = resolve_fixer
        try:
            diags = list(rule.check(project, files))
        except Exception as exc:  # one failure policy: name the rule; the run exits 2
            message = f"internal error in {cls.code}: {type(exc).__name__}: {exc}"
            if errors is None:
                raise InternalError(message) from exc
            errors.append(message)
            key = None  # never cache a partial answer
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
    if key is not None:
        cache.put_project(key, out)
    return out
