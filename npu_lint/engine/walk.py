"""The single traversal: one iterative pre-order walk of a file's tree, handing each node to the rules registered for its type."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable

from npu_lint.rules.base import REGISTRY, Context, Rule, load_rule_modules


def rule_classes(codes: Iterable[str]) -> list[type[Rule]]:
    load_rule_modules()
    return [REGISTRY[c] for c in sorted(codes) if c in REGISTRY]


# Leaf-only node kinds (expression contexts and operators) that no rule asks for are skipped, and so are the
# fields that never hold a node (names, identifiers, constants' values, operator fields).
_SKIPPABLE = (ast.expr_context, ast.operator, ast.boolop, ast.unaryop, ast.cmpop)
_SCALAR_FIELDS = frozenset(
    ("ctx", "op", "id", "attr", "name", "arg", "module", "level", "kind", "type_comment", "asname",
     "conversion", "is_async", "simple", "n", "s", "tag")
)  # fmt: skip
_SCALAR_BY_TYPE = {ast.Constant: ("value",), ast.MatchSingleton: ("value",), ast.Compare: ("ops",),
                   ast.Global: ("names",), ast.Nonlocal: ("names",), ast.MatchClass: ("kwd_attrs",),
                   ast.MatchMapping: ("rest",)}  # fmt: skip
_FIELDS: dict[type, tuple[str, ...]] = {}


def _node_fields(typ: type) -> tuple[str, ...]:
    skip = _SCALAR_BY_TYPE.get(typ, ())
    fields = tuple(f for f in typ._fields if f not in _SCALAR_FIELDS and f not in skip)  # type: ignore[attr-defined]
    _FIELDS[typ] = fields
    return fields


def _walk(tree: ast.AST, ctx: Context, rules: list[Rule]) -> None:
    """Pre-order traversal, iterative (deep trees cannot hit the recursion limit), once for all rules."""
    visit: dict[type, list[Callable[[ast.AST], None]]] = {}
    leave: dict[type, list[Callable[[ast.AST], None]]] = {}
    for rule in rules:
        for typ in rule.node_types:
            visit.setdefault(typ, []).append(rule.visit)
        for typ in rule.leave_types:
            leave.setdefault(typ, []).append(rule.leave)
    if any(issubclass(t, _SKIPPABLE) for t in (*visit, *leave)):
        _walk_generic(tree, ctx, visit, leave)
        return
    parents = ctx.parents
    # per node type, once: (its visitors, the fields that may hold children, whether anything leaves it)
    plan: dict[type, tuple[tuple[Callable[[ast.AST], None], ...], tuple[str, ...], bool]] = {}
    LEAVE = None  # stack marker: the next entry is a node to leave
    stack: list[ast.AST | None] = [tree]
    pop, push = stack.pop, stack.append
    while stack:
        node = pop()
        if node is LEAVE:
            node = pop()
            for fn in leave.get(type(node), ()):
                fn(node)
            parents.pop()
            continue
        typ = type(node)
        step = plan.get(typ)
        if step is None:
            step = plan[typ] = (
                tuple(visit.get(typ, ())),
                _FIELDS.get(typ) or _node_fields(typ),
                typ in leave,
            )
        fns, fields, leaves = step
        for fn in fns:
            fn(node)
        children: list[ast.AST] = []
        for name in fields:
            value = getattr(node, name, None)
            if value is None:
                continue
            if type(value) is list:
                if None in value:  # Dict.keys holds None for **x
                    children.extend([item for item in value if item is not None])
                else:
                    children.extend(value)
            else:
                children.append(value)
        if children or leaves:
            push(node)
            push(LEAVE)
            parents.append(node)
            children.reverse()
            stack.extend(children)


def _walk_generic(tree: ast.AST, ctx: Context, visit: dict, leave: dict) -> None:  # noqa: ANN001
    """The same traversal over every node, operators and contexts included (when a rule asks for them)."""
    parents = ctx.parents
    stack: list[tuple[ast.AST, bool]] = [(tree, False)]
    while stack:
        node, leaving = stack.pop()
        if leaving:
            for fn in leave.get(type(node), ()):
                fn(node)
            parents.pop()
            continue
        for fn in visit.get(type(node), ()):
            fn(node)
        stack.append((node, True))
        parents.append(node)
        stack.extend((child, False) for child in reversed(list(ast.iter_child_nodes(node))))
