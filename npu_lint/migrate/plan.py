"""The shape of a migration run: the staging copy, the packages in dependency order, step results, snapshots.

Every step runs on a staging copy of the VeOmni tree (a temporary directory), never on the user's tree. Before
each step the files it may touch are snapshotted; a step that fails is rolled back to that snapshot and the run
stops. Only at the end, and only with ``--apply``, the difference between the staging copy and the tree is
written to the tree (``commit``), through the engine's atomic writer, file by file; a write that fails restores
the files already written, so the tree is never left half-migrated.
"""

from __future__ import annotations

import ast
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from npu_lint.core.safeio import read_regular
from npu_lint.engine.write import copy_writable, staging_ignore
from npu_lint.veomni.layout import find_veomni_root

_MAX_FILE = 8 * 1024 * 1024


class MigrateError(Exception):
    """A usage problem (exit code 2): not a model package, no VeOmni tree, packages of different trees."""


@dataclass
class StepResult:
    """One step of the guide: what it did (``changed``: paths relative to the tree root), what it found, what
    is left for a person and why (``todo``: one sentence each)."""

    name: str
    title: str
    status: str = "unchanged"  # changed, unchanged, skipped, failed
    changed: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    todo: list[str] = field(default_factory=list)
    duration: float = 0.0
    data: dict[str, object] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["duration_s"] = round(out.pop("duration"), 2)
        return out


@dataclass
class Package:
    """One model package: its directory in the user's tree and in the staging copy, and its dotted module."""

    name: str
    real_dir: Path
    stage_dir: Path
    module: str

    @property
    def rel(self) -> str:
        return self.module.replace(".", "/")


@dataclass
class Run:
    """The state shared by the steps of one ``migrate`` run."""

    real_root: Path
    stage_root: Path
    packages: list[Package]
    apply: bool
    python: str
    timeout: float
    run_verify: bool = True
    results: list[StepResult] = field(default_factory=list)
    extra_files: set[str] = field(default_factory=set)  # files outside the packages a step created (tests)
    started: float = field(default_factory=time.perf_counter)

    def stage(self, rel: str) -> Path:
        return self.stage_root / rel

    def rel(self, path: str | Path) -> str:
        return Path(os.path.abspath(path)).relative_to(self.stage_root).as_posix()

    def tracked(self) -> dict[str, bytes | None]:
        """The files a migration may change (package directories, files created by steps) in the staging tree."""
        out: dict[str, bytes | None] = {}
        for pkg in self.packages:
            for path in _walk(pkg.stage_dir):
                out[self.rel(path)] = _read(path)
        for rel in self.extra_files:
            path = self.stage(rel)
            out[rel] = _read(path) if path.is_file() else None
        return out


def _walk(directory: Path) -> list[Path]:
    out = []
    for dirpath, dirnames, filenames in os.walk(directory):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
        out.extend(Path(dirpath) / f for f in sorted(filenames) if not f.endswith((".pyc", ".tmp")))
    return out


def _read(path: Path) -> bytes | None:
    try:
        return read_regular(path, limit=_MAX_FILE)[0]
    except OSError:
        return None


# -- packages ------------------------------------------------------------------------------------------------


def _dotted(root: Path, directory: Path) -> str:
    return ".".join(directory.resolve().relative_to(root.resolve()).parts)


def resolve_packages(dirs: list[str]) -> tuple[Path, list[tuple[str, Path, str]]]:
    """The VeOmni tree root holding every directory and, per package, (name, directory, dotted module), in
    dependency order: a package whose spec imports another package's module comes after it."""
    from npu_lint.audit import is_model_dir

    roots: set[Path] = set()
    found: list[tuple[str, Path, str]] = []
    for raw in dirs:
        path = Path(raw)
        if not path.is_dir():
            raise MigrateError(f"{raw}: not a directory")
        if not is_model_dir(path):
            raise MigrateError(
                f"{raw} is not a model package (no *_patch_gen_config.py, generated/ or modeling_*.py): give a "
                "directory such as veomni/models/transformers/<model>"
            )
        vroot = find_veomni_root(path)
        if vroot is None:
            raise MigrateError(f"{raw}: no VeOmni tree holds it (no veomni/ops or veomni/kernels above it)")
        roots.add(vroot.resolve())
        directory = path.resolve()
        linked = _symlink_inside(directory)
        if linked is not None:
            raise MigrateError(
                f"{linked} is a symbolic link: migrate writes only regular files inside the tree (a linked "
                "generated/ or spec would send the writes elsewhere); replace the link with the files it points to"
            )
        if all(d != directory for _, d, _ in found):
            found.append((directory.name, directory, _dotted(vroot, directory)))
    if len(roots) != 1:
        raise MigrateError("the packages belong to different VeOmni trees: migrate one tree at a time")
    return roots.pop(), _dependency_order(found)


def _symlink_inside(directory: Path) -> Path | None:
    """The first symbolic link inside a package directory (its files, generated/, ...), or None."""
    for dirpath, dirnames, filenames in os.walk(directory):
        for name in [*dirnames, *filenames]:
            candidate = Path(dirpath) / name
            if candidate.is_symlink():
                return candidate
    return None


def _imports_of(directory: Path) -> set[str]:
    out: set[str] = set()
    for path in directory.glob("*.py"):
        data = _read(path)
        try:
            tree = ast.parse(data or b"")
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                out.add(node.module)
    return out


def _dependency_order(found: list[tuple[str, Path, str]]) -> list[tuple[str, Path, str]]:
    deps = {
        module: {
            other
            for _, _, other in found
            if other != module and any(m == other or m.startswith(other + ".") for m in _imports_of(d))
        }
        for _, d, module in found
    }
    ordered: list[tuple[str, Path, str]] = []
    pending = list(found)
    while pending:
        ready = [p for p in pending if deps[p[2]] <= {q[2] for q in ordered}] or pending[
            :1
        ]  # a cycle: as given
        ordered.append(ready[0])
        pending.remove(ready[0])
    return ordered


# -- staging and snapshots -----------------------------------------------------------------------------------


def make_stage(real_root: Path) -> Path:
    """A private copy of the tree (without VCS data, caches and checkpoints) for the steps to work on. Its files
    are the run's own, hence writable (a read-only file of the real tree is refused when the result is applied)."""
    base = Path(tempfile.mkdtemp(prefix="npu-lint-migrate-"))
    stage = base / real_root.name
    shutil.copytree(
        real_root,
        stage,
        symlinks=True,
        ignore=staging_ignore,
        copy_function=copy_writable,
    )
    return stage


def drop_stage(stage_root: Path) -> None:
    shutil.rmtree(stage_root.parent, ignore_errors=True)


def restore(run: Run, snapshot: dict[str, bytes | None]) -> None:
    """Put the staging tree's tracked files back as ``snapshot`` had them (files created since are removed)."""
    now = run.tracked()
    for rel in set(now) | set(snapshot):
        before = snapshot.get(rel)
        path = run.stage(rel)
        if before is None:
            if path.exists():
                path.unlink()
        elif now.get(rel) != before:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(before)


def changes(run: Run, original: dict[str, bytes | None]) -> list[tuple[str, bytes | None, bytes | None]]:
    """(path relative to the root, bytes before, bytes after) of every tracked file the run changed."""
    now = run.tracked()
    out = []
    for rel in sorted(set(now) | set(original)):
        if rel.endswith(".pyc") or "/__pycache__/" in f"/{rel}":
            continue
        if original.get(rel) != now.get(rel):
            out.append((rel, original.get(rel), now.get(rel)))
    return out


def commit(real_root: Path, changed: list[tuple[str, bytes | None, bytes | None]]) -> list[str]:
    """Write the staged result into the user's tree through the engine's writer; all or nothing: a failure
    restores every file already written and re-raises. Returns the paths written."""
    from npu_lint.engine.write import create_new, write_atomic

    done: list[tuple[Path, bytes | None]] = []
    try:
        for rel, before, after in changed:
            target = real_root / rel
            current = _read(target) if target.exists() else None
            if current != before:
                raise OSError(f"{rel}: changed in the tree while migrate ran; nothing written")
            if after is None:
                continue  # a migration never deletes a file
            text = after.decode("utf-8")
            if before is None:
                target.parent.mkdir(parents=True, exist_ok=True)
                create_new(str(target), text, "utf-8")
            else:
                write_atomic(str(target), text, "utf-8", expect=None)
            done.append((target, before))
    except BaseException:
        for target, before in reversed(done):
            try:
                if before is None:
                    target.unlink()
                else:
                    write_atomic(str(target), before.decode("utf-8"), "utf-8")
            except OSError:
                pass
        raise
    return [rel for rel, _, after in changed if after is not None]
