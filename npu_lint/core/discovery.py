"""Which files to lint: walk the given paths, apply gitignore-style excludes (pathspec)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from npu_lint.core.config import Settings


@dataclass
class Discovery:
    files: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # one-line messages (exit code 2)


def _spec(patterns: list[str]):  # noqa: ANN202 - pathspec type imported lazily
    import pathspec

    return pathspec.GitIgnoreSpec.from_lines(patterns)


def _rel(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


def is_excluded(path: Path, settings: Settings, root: Path, spec=None, base: Path | None = None) -> bool:  # noqa: ANN001
    """Whether ``path`` matches an exclude pattern: by its name, or by its path relative to the config root.

    ``base`` is an explicitly named directory that is itself excluded: its descendants are then matched
    relative to it (naming a directory on the command line lints it, as in ruff).
    """
    spec = spec or _spec([*settings.exclude, *settings.extend_exclude])
    if spec.match_file(path.name) or spec.match_file(path.name + "/"):
        return True
    rel = _rel(path, base.resolve()) if base is not None else _rel(path, root)
    return spec.match_file(rel) or spec.match_file(rel + "/")


def discover(paths: list[str], settings: Settings, force_exclude: bool = False) -> Discovery:
    root = Path(settings.root).resolve()
    spec = _spec([*settings.exclude, *settings.extend_exclude])
    found: dict[str, None] = {}
    out = Discovery()
    for raw in paths:
        path = Path(raw)
        if not path.exists() and not path.is_symlink():
            out.errors.append(f"{raw}: no such file or directory")
            continue
        if path.is_file():
            # explicitly named files are linted unless --force-exclude
            if force_exclude and is_excluded(path, settings, root, spec):
                continue
            found[os.path.normpath(str(path))] = None
            continue
        if not path.is_dir():
            out.errors.append(f"{raw}: not a regular file or directory")
            continue
        base = path if is_excluded(path, settings, root, spec) else None
        seen_dirs: set[tuple[int, int]] = set()
        for dirpath, dirnames, filenames in os.walk(path, followlinks=False, onerror=None):
            current = Path(dirpath)
            try:
                st = current.stat()
                key = (st.st_dev, st.st_ino)
            except OSError as exc:
                out.errors.append(f"{dirpath}: {exc.strerror}")
                dirnames[:] = []
                continue
            if key in seen_dirs:  # symlink loop guard (followlinks=False makes this rare)
                dirnames[:] = []
                continue
            seen_dirs.add(key)
            kept = []
            for d in sorted(dirnames):
                sub = current / d
                if sub.is_symlink() or is_excluded(sub, settings, root, spec, base):
                    continue
                kept.append(d)
            dirnames[:] = kept
            for name in sorted(filenames):
                if not (name.endswith(".py") or name.endswith(".pyi")):
                    continue
                file = current / name
                if is_excluded(file, settings, root, spec, base):
                    continue
                if file.is_symlink() and not file.exists():
                    out.errors.append(f"{file}: broken symbolic link")
                    continue
                found[os.path.normpath(str(file))] = None
    out.files = sorted(found)
    return out
