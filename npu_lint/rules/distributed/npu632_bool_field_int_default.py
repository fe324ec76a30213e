"""NPU632 bool-field-int-default."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import last_name
from npu_lint.rules.base import Context, Example, Rule

_SEQUENCES = frozenset({"Tuple", "tuple", "List", "list", "Sequence", "Optional"})


def _bool_annotation(ann: ast.expr | None) -> bool:
    """``bool``, ``Tuple[bool]``, ``tuple[bool, ...]``, ``List[bool]``, ``Optional[bool]``."""
    if ann is None:
        return False
    if isinstance(ann, ast.Name):
        return ann.id == "bool"
    if isinstance(ann, ast.Subscript):
        base = last_name(ann.value) or ""
        if base not in _SEQUENCES:
            return False
        inner = ann.slice
        elts = inner.elts if isinstance(inner, ast.Tuple) else [inner]
        elts = [e for e in elts if not (isinstance(e, ast.Constant) and e.value is Ellipsis)]
        return bool(elts) and all(_bool_annotation(e) for e in elts)
    return False


def _int_literal(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


def _int_default(node: ast.expr | None) -> bool:
    """An int literal where a bool belongs (``1``, ``(1,)``, ``[0, 1]``)."""
    if node is None:
        return False
    if _int_literal(node):
        return True
    if isinstance(node, (ast.Tuple, ast.List)):
        return bool(node.elts) and any(_int_literal(e) for e in node.elts)
    return False


def _field_default(value: ast.expr | None) -> ast.expr | None:
    """``field(default=1)`` -> ``1``; a plain default as is."""
    if isinstance(value, ast.Call) and getattr(value.func, "id", getattr(value.func, "attr", "")) == "field":
        return next((k.value for k in value.keywords if k.arg == "default"), None)
    return value


class BoolFieldIntDefault(Rule):
    code = "NPU632"
    name = "bool-field-int-default"
    summary = (
        "A parameter or dataclass field typed as a boolean (or a tuple/list of booleans) defaults to an integer "
        "literal (`placement_innermost: Tuple[bool] = (1,)`)."
    )
    why = (
        "Parallel-state initialisers and argument dataclasses carry parallel layouts as parallel tuples: sizes "
        "(`Tuple[int] = (1,)`), names (`('ep',)`), and switches (`Tuple[bool]`). An integer default in a "
        "boolean slot is the sizes' default copied into the switches' place: `(1,)` is truthy, so every caller "
        "that sets the sizes and relies on the default gets the switch on (expert parallelism placed outside "
        "FSDP, which the mesh builder rejects or lays out differently from the trainer's `ep_outside=False`). "
        "What was meant is a boolean, and writing it as one makes the default say which. The check reads every "
        "function parameter and class-level annotated field (with `field(default=...)`) whose annotation is "
        "`bool` or a tuple/list/Optional of `bool` and whose default is an int literal or holds one."
    )
    bad = (
        Example(
            """
            from typing import Tuple


            def init_parallel_state(
                extra_parallel_sizes: Tuple[int] = (1,),
                extra_parallel_placement_innermost: Tuple[bool] = (1,),
            ):
                ...
            """,
            path="veomni/distributed/parallel_state.py",
            title="a switch tuple defaulting to the sizes' (1,)",
        ),
    )
    good = (
        Example(
            """
            from typing import Tuple


            def init_parallel_state(
                extra_parallel_sizes: Tuple[int] = (1,),
                extra_parallel_placement_innermost: Tuple[bool] = (False,),
                retries: int = 0,
            ):
                ...
            """,
            path="veomni/distributed/parallel_state.py",
        ),
    )
    fix_safety = "No fix: whether the switch defaults on or off is the author's call."

    requires = ("bool",)
    node_types = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.ClassDef):
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    default = _field_default(stmt.value)
                    if _bool_annotation(stmt.annotation) and _int_default(default):
                        assert default is not None
                        self._report(stmt.target.id, default)
            return
        assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        args = node.args
        positional = [*args.posonlyargs, *args.args]
        pairs = list(zip(positional[len(positional) - len(args.defaults) :], args.defaults)) + [
            (a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None
        ]
        for arg, default in pairs:
            if _bool_annotation(arg.annotation) and _int_default(default):
                self._report(arg.arg, default)

    def _report(self, name: str, default: ast.expr) -> None:
        try:
            truthy = bool(ast.literal_eval(default))
        except (ValueError, TypeError, SyntaxError):
            truthy = True
        value = ast.unparse(default)
        if truthy:
            effect = "is truthy, so every caller relying on it gets the switch on"
        else:
            effect = "is falsy, so the switch is off by luck of the integer, and code testing `is False` or reading the typed config sees an int"
        self.report(
            default,
            f"`{name}` is typed as a boolean but defaults to `{value}`, an integer: a size-like default in a "
            f"switch's place; `{value}` {effect}; write the boolean meant",
        )
