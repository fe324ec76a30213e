"""The exclude matcher: the direct expression test used when no pattern is negated decides exactly as
pathspec's gitignore matcher does."""

from __future__ import annotations

import itertools

import pathspec
import pytest

from npu_lint.core.config import DEFAULT_EXCLUDE
from npu_lint.core.discovery import _spec

PATTERN_SETS = [
    list(DEFAULT_EXCLUDE),
    [*DEFAULT_EXCLUDE, "generated/", "*_npu.py", "veomni/models/**/tests", "/top_only.py", "docs/*.py"],
    ["**/fixtures/**", "a/**/b", "[abc]*.py", "?x.py", "build"],
    [*DEFAULT_EXCLUDE, "generated/", "!generated/keep.py"],  # a negation: pathspec decides
    ["*.py", "!keep.py", "keep.py"],
    ["# a comment", "", "   ", "dist"],
]
NAMES = ["a", "b", "x", "ax", "bx", "build", "dist", ".git", "generated", "keep.py", "top_only.py", "tests",
         "fixtures", "m_npu.py", "veomni", "models", "docs", "c.py", "__pycache__", ".venv"]  # fmt: skip


def _paths() -> list[str]:
    out = [*NAMES, *(n + "/" for n in NAMES)]
    for depth in (2, 3):
        for parts in itertools.islice(itertools.product(NAMES, repeat=depth), 0, None, 7):
            out.append("/".join(parts))
            out.append("/".join(parts) + "/")
    out += ["./build", "/dist/x.py", "./veomni/models/q/tests", "veomni/models/q/r/tests/"]
    return out


@pytest.mark.parametrize("patterns", PATTERN_SETS, ids=range(len(PATTERN_SETS)))
def test_fast_matcher_agrees_with_pathspec(patterns: list[str]) -> None:
    ours = _spec(patterns)
    theirs = pathspec.GitIgnoreSpec.from_lines(patterns)
    negated = any(p.include is False for p in theirs.patterns)
    assert (ours.searches is None) == negated  # the direct test is used exactly when nothing is negated
    paths = _paths()
    assert len(paths) > 1000
    differ = [p for p in paths if ours.match_file(p) != theirs.match_file(p)]
    assert differ == []
    assert any(ours.match_file(p) for p in paths) and not all(ours.match_file(p) for p in paths)
