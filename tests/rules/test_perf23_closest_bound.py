"""NPU458's statement alignment computes which reference statement a rewritten one is closest to (``difflib``
ratios, the costly part) only when the choice can matter: some statement of the run can pair with it
(`refedits._may_pair`). The edits found are the same either way."""

from __future__ import annotations

import ast

import pytest

from npu_lint.veomni import refedits

THEIRS = """
def f(x):
    a = x + 1
    b = a * 2
    c = b - 1
    return c
"""


def _edits(mine: str, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], int]:
    calls = []
    closest = refedits._closest

    def counted(up, c):  # noqa: ANN001, ANN202
        calls.append(c)
        return closest(up, c)

    monkeypatch.setattr(refedits, "_closest", counted)
    found = refedits.function_edits(ast.parse(mine).body[0], ast.parse(THEIRS).body[0])
    return [what for _site, what in found], len(calls)


def test_a_rewritten_run_that_cannot_pair_is_not_ranked(monkeypatch: pytest.MonkeyPatch) -> None:
    mine = """
def f(x):
    a = x + 1
    y = foo(x)
    z = bar(y)
    if z:
        pass
    return c
"""
    assert _edits(mine, monkeypatch) == ([], 0)


def test_a_statement_with_one_edit_is_still_paired_with_its_closest(monkeypatch: pytest.MonkeyPatch) -> None:
    mine = """
def f(x):
    a = x + 1
    y = foo(x)
    b = a * 3
    w = baz(x)
    return c
"""
    found, ranked = _edits(mine, monkeypatch)
    assert found == ["the constant `2` is `3` here"]
    assert ranked == 1  # only `b = a * 3` could pair with a statement of the run


def test_a_compound_statement_is_ranked(monkeypatch: pytest.MonkeyPatch) -> None:
    theirs_if = THEIRS.replace("    c = b - 1\n", "    if b:\n        c = b - 1\n")
    mine = """
def f(x):
    a = x + 1
    y = foo(x)
    w = bar(y)
    if b:
        c = b + 1
    return c
"""
    calls = []
    closest = refedits._closest
    monkeypatch.setattr(refedits, "_closest", lambda up, c: calls.append(c) or closest(up, c))
    found = refedits.function_edits(ast.parse(mine).body[0], ast.parse(theirs_if).body[0])
    assert [type(c).__name__ for c in calls] == ["If"]
    assert [what for _site, what in found] == [
        "`1 + b` uses `+` where the reference uses `-`"
    ]  # canonical order
