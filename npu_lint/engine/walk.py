"""The single traversal: one iterative pre-order walk of a file's tree, handing each node to the rules registered for its type."""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable

from npu_lint.core.astutil import file_index
from npu_lint.rules.base import REGISTRY, Context, Rule, load_rule_modules


def rule_classes(codes: Iterable[str]) -> list[type[Rule]]:
    load_rule_modules()
    return [REGISTRY[c] for c in sorted(codes) if c in REGISTRY]


# Leaf-only node kinds (expression contexts and operators; the parser shares one instance between places) that
# no rule asks for are not listed (``astutil.FileIndex`` leaves them out); a rule asking for one gets the generic walk.
_SKIPPABLE = (ast.expr_context, ast.operator, ast.boolop, ast.unaryop, ast.cmpop)


def _walk(tree: ast.AST, ctx: Context, rules: list[Rule]) -> None:
    """Pre-order traversal over the file's one listing (no recursion: deep trees cannot hit the limit), once for
    all rules."""
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
    # per node type, once: (its visitors, whether anything leaves it)
    plan: dict[type, tuple[tuple[Callable[[ast.AST], None], ...], bool]] = {}
    # the file's one pre-order listing (``nodes_of`` answers from it too): a node's subtree is the nodes after it
    # that are deeper; a node is left (and popped from the parents) when the walk reaches a node no deeper
    index = file_index(tree)
    nodes, depths = index.nodes, index.depth
    last = len(nodes) - 1
    entered: list[tuple[ast.AST, int]] = []  # the nodes pushed on the parents, depths increasing
    for i, node in enumerate(nodes):
        depth = depths[i]
        while entered and entered[-1][1] >= depth:
            left = entered.pop()[0]
            for fn in leave.get(type(left), ()):
                fn(left)
            parents.pop()
        typ = type(node)
        step = plan.get(typ)
        if step is None:
            step = plan[typ] = (tuple(visit.get(typ, ())), typ in leave)
        fns, leaves = step
        for fn in fns:
            fn(node)
        if leaves or (i < last and depths[i + 1] > depth):
            parents.append(node)
            entered.append((node, depth))
    while entered:
        left = entered.pop()[0]
        for fn in leave.get(type(left), ()):
            fn(left)
        parents.pop()


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
