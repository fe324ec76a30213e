"""NPU230 late-bound-row-callable."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import call_name, nodes_of
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.registry import ROW_DECLARATIONS


def _targets(node: ast.AST) -> set[str]:
    return {n.id for n in nodes_of(node, ast.Name) if isinstance(n.ctx, ast.Store)}  # type: ignore[attr-defined]


def _free_loads(func: ast.Lambda | ast.FunctionDef) -> set[str]:
    """Names the callable reads that it neither takes as a parameter (defaults bind at definition) nor binds."""
    args = func.args
    params = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
    params.update(a.arg for a in (args.vararg, args.kwarg) if a is not None)
    body = func.body if isinstance(func.body, list) else [func.body]
    loads: set[str] = set()
    bound: set[str] = set()
    for stmt in body:
        for name in nodes_of(stmt, ast.Name):
            assert isinstance(name, ast.Name)
            (loads if isinstance(name.ctx, ast.Load) else bound).add(name.id)
    return loads - params - bound


class LateBoundRowCallable(Rule):
    code = "NPU230"
    name = "late-bound-row-callable"
    summary = (
        "A registry row (or table entry) declared in a loop is given a lambda or nested function that reads the "
        "loop variable: every row calls it with the variable's last value."
    )
    why = (
        "A closure reads the loop variable when it is called, not when it is made. Rows registered in a loop "
        "-- `for impl in IMPLS: register_op(op, variant, impl, wrapper=lambda *a, **k: lookup(impl)(*a, **k))` -- "
        "all dispatch to the implementation of the last iteration: a handle resolved for `eager`, `sdpa` or the "
        "NPU row runs another kernel than the one its name and requirement promise, and nothing fails. Bind the "
        "value when the row is made: call the lookup in the loop (`wrapper=lookup(impl)`), pass it as a default "
        "(`lambda *a, impl=impl, **k: ...`) or use `functools.partial`."
    )
    bad = (
        Example(
            """
            from veomni.ops.registry import register_op

            for _impl in ("eager", "sdpa", "npu"):
                register_op("toy_attention", "standard", _impl, wrapper=lambda *a, **k: lookup(_impl)(*a, **k))
            """,
            path="veomni/ops/kernels/toy_attention/__init__.py",
            title="every row's wrapper runs the last implementation",
        ),
    )
    good = (
        Example(
            """
            from veomni.ops.registry import register_op

            for _impl in ("eager", "sdpa", "npu"):
                register_op("toy_attention", "standard", _impl, wrapper=lookup(_impl))
            for _impl in ("eager", "sdpa"):
                register_op("toy_attention", "packed", _impl, wrapper=lambda *a, _impl=_impl, **k: lookup(_impl)(*a, **k))
            """,
            path="veomni/ops/kernels/toy_attention/__init__.py",
        ),
    )
    fix_safety = (
        "No fix: binding the value (a default, `functools.partial`, an eager lookup) is the author's choice."
    )
    requires = (("lambda", "def "), ("for ",))
    node_types = (ast.Call, ast.Assign)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        loops = [p for p in self.ctx.parents if isinstance(p, (ast.For, ast.AsyncFor, ast.comprehension))]
        if not loops:
            return
        if isinstance(node, ast.Assign):
            # a table entry kept for later: `TABLE[impl] = lambda *a: lookup(impl)(*a)`
            if not any(isinstance(t, ast.Subscript) for t in node.targets) or not isinstance(
                node.value, ast.Lambda
            ):
                return
            names: set[str] = set()
            for loop in loops:
                names |= _targets(loop.target)
            late = sorted(_free_loads(node.value) & names)
            if late:
                self.report(
                    node.value,
                    f"this lambda reads the loop variable `{late[0]}` when it is called, not when the entry is "
                    f"stored: every entry made in the loop runs with its last value; bind it now "
                    f"(`{late[0]}={late[0]}` as a default, or call the lookup in the loop)",
                )
            return
        assert isinstance(node, ast.Call)
        if call_name(node) not in ROW_DECLARATIONS:
            return
        loop_names: set[str] = set()
        for loop in loops:
            loop_names |= _targets(loop.target)
        local_defs = {
            d.name: d
            for loop in loops
            if isinstance(loop, (ast.For, ast.AsyncFor))
            for d in loop.body
            if isinstance(d, ast.FunctionDef)
        }
        for value in (*node.args, *(k.value for k in node.keywords)):
            func: ast.Lambda | ast.FunctionDef | None = None
            if isinstance(value, ast.Lambda):
                func = value
            elif isinstance(value, ast.Name):
                func = local_defs.get(value.id)  # a function defined in the loop body
            if func is None:
                continue
            late = sorted(_free_loads(func) & loop_names)
            if late:
                self.report(
                    value,
                    f"this {'lambda' if isinstance(func, ast.Lambda) else 'function'} reads the loop variable `{late[0]}` when it is called, not when the row is "
                    f"registered: every row made in the loop runs with its last value; bind it now "
                    f"(`{late[0]}={late[0]}` as a default, or call the lookup in the loop)",
                )
                return
