"""The file's one pre-order index (``astutil.FileIndex``): ``nodes_of`` answers and the engine's walk read it, and
both must give exactly what a walk of the subtree (``ast.walk`` order) and a recursive pre-order traversal give."""

from __future__ import annotations

import ast
import textwrap
from types import SimpleNamespace

from npu_lint.core.astutil import FileIndex, index_file, nodes_of, walk_memo
from npu_lint.engine.walk import _SKIPPABLE, _walk

SOURCE = textwrap.dedent(
    """
    import torch as t

    class A(B, metaclass=M):
        x: int = 1

        @deco(a=[1, 2])
        def f(self, a, *b, c=3, **d):
            if a and not b:
                for i in range(3):
                    y = [j * 2 for j in b if j > -1]
                    def g(z=lambda q: q + 1):
                        return {k: v for k, v in d.items()}, {**d, None: 1}
            elif c:
                with open(a) as fh, t.no_grad():
                    try:
                        raise ValueError(f"{a!r:>3}")
                    except (KeyError, ValueError) as e:
                        pass
                    finally:
                        del y
            else:
                match a:
                    case [1, *rest] | {"k": 2, **rest}:
                        pass
                    case Point(x=0) if c > 1:
                        global G
            return a[1:2, ...], (yield), await c if c else None

    async def h():
        async for x in y:
            x += 1
    """
)


def _reference_nodes_of(node: ast.AST, types: tuple[type, ...]) -> list[ast.AST]:
    return [n for n in ast.walk(node) if type(n) in types]


def test_nodes_of_from_the_file_index_is_the_walk_of_the_subtree() -> None:
    tree = ast.parse(SOURCE)
    index = FileIndex(tree)
    kinds = sorted(
        {type(n) for n in ast.walk(tree) if not isinstance(n, _SKIPPABLE)}, key=lambda t: t.__name__
    )
    asked = [(k,) for k in kinds] + [(ast.Name, ast.Attribute), (ast.Call, ast.If, ast.Return), tuple(kinds)]
    checked = 0
    for sub in ast.walk(tree):
        if not isinstance(sub, (ast.stmt, ast.Module, ast.Lambda)):
            assert index.nodes_of(sub, (ast.Name,)) is None  # an expression (or a shared node) is walked
            continue
        for types in asked:
            got = index.nodes_of(sub, types)
            want = _reference_nodes_of(sub, types)
            assert got is not None and len(got) == len(want) and all(a is b for a, b in zip(got, want)), (
                sub,
                types,
            )
            checked += 1
    assert checked > 1000
    assert index.nodes_of(tree, (ast.Load,)) is None  # shared kinds are walked, not indexed
    assert index.nodes_of(ast.parse("x").body[0], (ast.Name,)) is None  # another tree's node


def test_nodes_of_in_a_scope_uses_the_file_and_falls_back_for_other_trees() -> None:
    tree = ast.parse(SOURCE)
    other = ast.parse(SOURCE)
    with walk_memo():
        index_file(tree)
        for root in (tree, other):
            for func in [n for n in ast.walk(root) if isinstance(n, (ast.FunctionDef, ast.ClassDef))]:
                for types in ((ast.Name,), (ast.Load,), (ast.Call, ast.Name)):
                    got = nodes_of(func, *types)
                    want = _reference_nodes_of(func, types)
                    assert len(got) == len(want) and all(a is b for a, b in zip(got, want))


def _reference_events(tree: ast.AST, leave_types: tuple[type, ...]) -> list[tuple[str, ast.AST, int]]:
    events: list[tuple[str, ast.AST, int]] = []
    depth = [0]

    def rec(node: ast.AST) -> None:
        events.append(("visit", node, depth[0]))
        children = [c for c in ast.iter_child_nodes(node) if not isinstance(c, _SKIPPABLE)]
        if children or isinstance(node, leave_types):
            depth[0] += 1
            for child in children:
                rec(child)
            depth[0] -= 1
            if isinstance(node, leave_types):
                events.append(("leave", node, depth[0]))

    rec(tree)
    return events


def test_engine_walk_over_the_index_is_the_recursive_pre_order() -> None:
    tree = ast.parse(SOURCE)
    kinds = tuple({type(n) for n in ast.walk(tree) if not isinstance(n, _SKIPPABLE)})
    leaves = (ast.FunctionDef, ast.If, ast.Name, ast.ClassDef, ast.Constant)
    ctx = SimpleNamespace(parents=[])
    events: list[tuple[str, ast.AST, int]] = []
    rule = SimpleNamespace(
        node_types=kinds,
        leave_types=leaves,
        visit=lambda n: events.append(("visit", n, len(ctx.parents))),
        leave=lambda n: events.append(("leave", n, len(ctx.parents) - 1)),
    )
    _walk(tree, ctx, [rule])  # type: ignore[arg-type]
    want = _reference_events(tree, leaves)
    assert [(e, type(n).__name__, d) for e, n, d in events] == [(e, type(n).__name__, d) for e, n, d in want]
    assert all(a[1] is b[1] for a, b in zip(events, want))
    assert ctx.parents == []


def test_a_tree_deeper_than_a_byte_finds_subtree_ends_too() -> None:
    tree = ast.parse(
        "def f():\n    x = " + " + ".join(["a"] * 400) + "\n    return x\n\ndef g():\n    return y\n"
    )
    index = FileIndex(tree)
    assert max(index.depth) > 255
    for func in tree.body:
        got = index.nodes_of(func, (ast.Name,))
        want = _reference_nodes_of(func, (ast.Name,))
        assert got is not None and len(got) == len(want) and all(a is b for a, b in zip(got, want))


def test_literal_readers_none_tested_and_int_value() -> None:
    from npu_lint.core.astutil import int_value, none_tested

    def expr(text: str) -> ast.expr:
        return ast.parse(text, mode="eval").body

    assert none_tested(expr("x is None")) == "x"
    assert [
        none_tested(expr(t)) for t in ("x is not None", "x == None", "x.y is None", "x is 0", "None is x")
    ] == [None] * 5
    assert [int_value(expr(t)) for t in ("3", "-100", "True", "1.0", "-x")] == [3, -100, None, None, None]
