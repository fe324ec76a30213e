"""Which files to lint: walk the given paths, apply gitignore-style excludes (pathspec)."""

from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from npu_lint.core.config import Settings


@dataclass
class Discovery:
    files: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # one-line messages (exit code 2)
    excluded: int = 0  # Python files left out by the excludes
    symlinks: int = 0  # symbolic links met inside directories (not followed)
    temp_files: list[str] = field(default_factory=list)  # dot-named *.tmp files met on the way


class _Excludes:
    """The exclude patterns, compiled by pathspec (gitignore semantics). Without a negated (``!``) pattern a
    path is excluded exactly when one pattern's expression finds it, so those expressions are tried directly
    (pathspec's general matcher, which weighs negations and their order, costs about 15x more per path on a
    warm run); with one, pathspec decides. A plain name (``build``, ``.venv``: the default excludes) is compiled
    here to the expression pathspec gives it, so a run with no other pattern does not import pathspec."""

    def __init__(self, patterns: list[str]) -> None:
        if all(_plain(p) for p in patterns):
            # one expression for all: a path matches it exactly when it matches one name's
            names = "|".join(re.escape(p) for p in patterns)
            self.searches = [re.compile(f"^(?:.+/)?(?:{names})(?:/|$)").search] if patterns else []
            return
        import pathspec

        self.spec = pathspec.GitIgnoreSpec.from_lines(patterns)
        compiled = list(self.spec.patterns)
        self.searches = (
            [p.regex.search for p in compiled if p.include and p.regex is not None]
            if all(p.include is not False for p in compiled)
            else None
        )

    def match_file(self, file: str) -> bool:
        if self.searches is None:
            return self.spec.match_file(file)
        if file.startswith("/"):
            file = file[1:]
        elif file.startswith("./"):
            file = file[2:]
        return any(search(file) for search in self.searches)


# a pattern that is one file or directory name, no wildcard, slash, negation, comment, escape or space, not made of
# dots only: gitignore matches it as a whole path component at any depth (pathspec: ``^(?:.+/)?NAME(?:/|$)``)
_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def _plain(pattern: str) -> bool:
    return _NAME.fullmatch(pattern) is not None and pattern.strip(".") != ""


def _spec(patterns: list[str]) -> _Excludes:
    return _Excludes(patterns)


def _rel(path: Path, root: Path, real: Path | None = None) -> str:
    try:
        return (real or path.resolve()).relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


def is_excluded(  # noqa: ANN001
    path: Path, settings: Settings, root: Path, spec=None, base: Path | None = None, real: Path | None = None
) -> bool:
    """Whether ``path`` matches an exclude pattern: by its name, or by its path relative to the config root.

    ``base`` is an explicitly named directory that is itself excluded, resolved: its descendants are then
    matched relative to it (naming a directory on the command line lints it, as in ruff). ``real`` is
    ``path`` already resolved (a walk resolves its top once and joins names to it).
    """
    spec = spec or _spec([*settings.exclude, *settings.extend_exclude])
    if spec.match_file(path.name) or spec.match_file(path.name + "/"):
        return True
    rel = _rel(path, base or root, real)
    return spec.match_file(rel) or spec.match_file(rel + "/")


def _explicit_kind(path: Path) -> str:
    """``file``, ``dir``, or a one-line reason it is neither (a symlink named explicitly is followed)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "symbolic link loop"
        if os.path.islink(path):
            return "broken symbolic link"
        return "no such file or directory" if exc.errno == errno.ENOENT else (exc.strerror or str(exc))
    if stat.S_ISREG(st.st_mode):
        return "file"
    if stat.S_ISDIR(st.st_mode):
        return "dir"
    return "not a regular file or directory"


def discover(paths: list[str], settings: Settings, force_exclude: bool = False) -> Discovery:
    """The files to lint. Inside a directory only regular files are taken: symbolic links (files and
    directories) are not followed (name one explicitly to lint it), and a FIFO, socket or device named
    ``*.py`` is reported, never opened. An unreadable directory is reported (exit code 2), never skipped
    silently. npu-lint's own temporary files (``.*.npu-lint-<pid>.*.tmp``) met on the way are listed in
    ``temp_files`` so that stale ones can be removed."""
    root = Path(settings.root).resolve()
    spec = _spec([*settings.exclude, *settings.extend_exclude])
    found: dict[str, None] = {}
    out = Discovery()
    for raw in paths:
        path = Path(raw)
        kind = _explicit_kind(path)
        if kind == "file":
            # explicitly named files are linted unless --force-exclude
            if force_exclude and is_excluded(path, settings, root, spec):
                out.excluded += 1
                continue
            found[os.path.normpath(str(path))] = None
            continue
        if kind != "dir":
            out.errors.append(f"{raw}: {kind}")
            continue
        base = path.resolve() if is_excluded(path, settings, root, spec) else None
        seen_dirs: set[tuple[int, int]] = set()

        def unreadable(exc: OSError) -> None:
            out.errors.append(f"{exc.filename}: cannot read directory: {exc.strerror or exc}")

        top = str(path)
        real_top = path.resolve()  # resolved once: links inside are not followed, so names join onto it
        for dirpath, dirnames, filenames in os.walk(top, followlinks=False, onerror=unreadable):
            current = Path(dirpath)
            real = real_top / dirpath[len(top) :].lstrip(os.sep) if dirpath != top else real_top
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
                try:
                    link = sub.is_symlink()
                except OSError as exc:  # a name beyond PATH_MAX: that directory is skipped, the walk goes on
                    out.errors.append(f"{sub}: {exc.strerror or exc} (skipped)")
                    continue
                if link or is_excluded(sub, settings, root, spec, base, real / d):
                    continue
                kept.append(d)
            dirnames[:] = kept
            for name in sorted(filenames):
                if name.endswith(".tmp") and name.startswith("."):
                    out.temp_files.append(str(current / name))
                    continue
                if not (name.endswith(".py") or name.endswith(".pyi")):
                    continue
                file = current / name
                try:
                    mode = os.lstat(file).st_mode
                except OSError as exc:
                    out.errors.append(f"{file}: {exc.strerror or exc}")
                    continue
                if stat.S_ISLNK(mode):
                    out.symlinks += 1  # not followed inside a directory (docs/architecture.md)
                    continue
                if is_excluded(file, settings, root, spec, base, real / name):
                    out.excluded += 1
                    continue
                if not stat.S_ISREG(mode):
                    out.errors.append(f"{file}: not a regular file (skipped)")
                    continue
                found[os.path.normpath(str(file))] = None
    out.files = sorted(found)
    return out
