"""The shared per-run work (issue 19): walks listed once per file, suppressions tokenized only when they may
apply, upstream config fields read once."""

from __future__ import annotations

import ast

from npu_lint.core import astutil

CODE = """\
import torch


def f(x):
    y = [a + 1 for a in x]  # noqa: E501
    return torch.zeros(3).cuda()


class C:
    def g(self):
        return {k: v for k, v in self.items()}
"""


def test_walk_keeps_ast_walk_order_and_is_listed_once_inside_a_memo_scope() -> None:
    tree = ast.parse(CODE)
    func = tree.body[1]
    assert astutil.walk(func) == list(ast.walk(func))
    assert astutil.walk(func) is not astutil.walk(func)  # no scope: a fresh list each time
    with astutil.walk_memo():
        first = astutil.walk(func)
        assert first == list(ast.walk(func))
        assert astutil.walk(func) is first  # listed once
        assert astutil.walk(tree) == list(ast.walk(tree))
        with astutil.walk_memo():  # a nested scope starts empty
            assert astutil.walk(func) is not first
    assert astutil.walk(func) is not first  # the scope's lists are dropped with it


def test_walk_memo_is_bounded(monkeypatch) -> None:
    monkeypatch.setattr(astutil, "_WALK_MEMO_MAX", 3)
    nodes = list(ast.walk(ast.parse(CODE)))[:10]
    with astutil.walk_memo():
        for node in nodes:
            astutil.walk(node)
            assert len(astutil._WALK_MEMO[-1]) <= 3
