"""Plain-name exclude patterns (the defaults) are compiled without pathspec to the expression pathspec gives them:
the same paths are excluded."""

from __future__ import annotations

import itertools

import pathspec

from npu_lint.core.config import DEFAULT_EXCLUDE
from npu_lint.core.discovery import _Excludes, _plain

NAMES = [*DEFAULT_EXCLUDE, "foo.py", "a-b", "x.y.z", "_private", "-dash", "trailing."]
PARTS = [
    "build",
    "builds",
    "rebuild",
    ".git",
    ".gitx",
    "git",
    "src",
    "a-b",
    "venv",
    ".venv",
    "foo.py",
    "foo_py",
]


def _paths() -> list[str]:
    out = []
    for n in (1, 2, 3):
        for combo in itertools.product(PARTS, repeat=n):
            path = "/".join(combo)
            out += [path, path + "/", "/" + path, "./" + path]
    return out


def _old(patterns: list[str], file: str) -> bool:
    """What ``_Excludes`` answered with pathspec's expressions (no negated pattern: tried directly)."""
    searches = [p.regex.search for p in pathspec.GitIgnoreSpec.from_lines(patterns).patterns if p.include]
    if file.startswith("/"):
        file = file[1:]
    elif file.startswith("./"):
        file = file[2:]
    return any(search(file) for search in searches)


def test_plain_names_match_as_pathspec_does() -> None:
    assert all(_plain(p) for p in NAMES)
    ours = _Excludes(NAMES)
    assert not hasattr(ours, "spec")  # compiled without pathspec
    spec = pathspec.GitIgnoreSpec.from_lines(NAMES)
    for path in _paths():
        assert ours.match_file(path) == _old(NAMES, path), path
        if not path.startswith(("/", "./")):
            assert ours.match_file(path) == spec.match_file(path), path


def test_other_patterns_go_to_pathspec() -> None:
    for pattern in ("*.py", "a/b", "!keep", "#comment", "a\\\\b", ".", "..", "dir/", " x", "a?", "[ab]"):
        assert not _plain(pattern), pattern


def test_no_pattern_excludes_nothing() -> None:
    assert not _Excludes([]).match_file("build/x.py")
    assert _Excludes(["build"]).match_file("a/build/x.py")
