"""Robustness on valid Python of every shape: no rule may raise, the single traversal must reach every
node, and fixes must keep the file parsable and be idempotent. Each snippet reproduces a crash or a broken
fix found by running every rule over large real trees (transformers, the VeOmni wheel, a whole venv)."""

from __future__ import annotations

import ast
import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import check_source, fix_source
from npu_lint.engine.walk import _SKIPPABLE
from npu_lint.rules.base import REGISTRY, Context, load_rule_modules

load_rule_modules()
ALL = sorted(REGISTRY)

# Syntax a model package rarely holds but real trees do.
MANY_SHAPES = """
from __future__ import annotations
import torch

def f(cmd, a, /, b=1, *args, c, d=2, **kw):
    global G
    match cmd:
        case Point(x=0, y=yy) | Point(x=yy, y=0) if yy:
            pass
        case {"k": 1, **rest}:
            pass
        case [1, *others]:
            pass
        case str() as s:
            pass
        case None:
            pass
        case _:
            pass
    try:
        pass
    except* ValueError as eg:
        pass
    x = [y async for y in z] if (n := len(a)) else {k: v for k, v in kw.items()}
    print(f"{x!r:>{n}} {b=}")
    lam = lambda q=1, *r, s, **t: q
    del x
    def inner():
        nonlocal lam
    return torch.cuda.is_available()
"""


def _lint(text: str, fix: bool = False) -> None:
    src = SourceFile.from_text("pkg/mod.py", textwrap.dedent(text))
    check_source(src, ALL, None, fix)


def _fixed(text: str, path: str = "pkg/mod.py") -> str:
    """Every rule's fixes, unsafe included: none dropped as unparsable, and a second run changes nothing."""
    src = SourceFile.from_text(path, textwrap.dedent(text))
    outcome = fix_source(src, ALL, Settings(), unsafe=True)
    assert outcome.dropped == []
    ast.parse(outcome.text)
    again = fix_source(SourceFile.from_text(path, outcome.text), ALL, Settings(), unsafe=True)
    assert again.text == outcome.text
    return outcome.text


def test_every_rule_survives_many_shapes() -> None:
    _lint(MANY_SHAPES)
    _lint(MANY_SHAPES, fix=True)


def test_traversal_reaches_every_node() -> None:
    """The walker reads only the fields that can hold nodes: a field holding identifiers (MatchClass.kwd_attrs,
    MatchMapping.rest) once reached the walker as a str and raised."""
    import npu_lint.engine.walk as engine

    tree = ast.parse(MANY_SHAPES)
    seen: list[ast.AST] = []

    class Every:
        node_types = tuple(
            t for t in vars(ast).values() if isinstance(t, type) and issubclass(t, ast.AST) and t is not ast.AST
            and not issubclass(t, _SKIPPABLE)
        )  # fmt: skip
        leave_types = ()

        def visit(self, node: ast.AST) -> None:
            seen.append(node)

    ctx = Context(SourceFile.from_text("m.py", MANY_SHAPES), tree)
    engine._walk(tree, ctx, [Every()])  # type: ignore[list-item]
    expected = [n for n in ast.walk(tree) if not isinstance(n, _SKIPPABLE)]
    assert sorted(map(id, seen)) == sorted(map(id, expected))


def test_is_available_inside_fstring_is_not_reported() -> None:
    """``{torch.cuda.is_available() = }`` in a message: the parenthesised replacement used the f-string's own
    quote (unparsable before Python 3.12), and the call only shows a value, it does not branch."""
    text = """
    import torch

    def check(log):
        use = torch.cuda.is_available()
        log.warning(f"turning graphs off: {torch.cuda.is_available() = }")
        return use
    """
    src = SourceFile.from_text("pkg/mod.py", textwrap.dedent(text))
    lines = sorted(d.line for d in check_source(src, ["NPU102"], None, True))
    assert lines == [5]
    assert "{torch.cuda.is_available() = }" in _fixed(text)
