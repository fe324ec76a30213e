"""Zero-argument implementation resolvers a tree defines on top of its ops-config resolver (NPU204).

The VeomniOp tree wraps ``resolve_op_impl("moe_implementation")`` in ``resolve_moe_impl()``; a handle built with
the wrapper reads the wrapper's field. ``wrapped_field(index, module, name)`` reads the wrapper's body from the
tree (statically, through the run's one store of parsed files) and answers the literal field it resolves, or
None when it is not such a wrapper (a docstring and one ``return <call>("<field>")``).
"""

from __future__ import annotations

import ast

from npu_lint.core.astutil import str_value
from npu_lint.veomni.imports import ModuleIndex, module_tree


def wrapped_field(index: ModuleIndex, module: str, name: str) -> str | None:
    """The ops-config field the tree's zero-argument function ``name`` (imported from ``module``) resolves."""
    memo: dict[str, str | None] = index.__dict__.setdefault("_wrapped_fields", {})
    key = f"{module}:{name}"
    if key in memo:
        return memo[key]
    memo[key] = None
    try:
        origin = index.origin(module, name)
        located = index.module_path(origin) if origin else None
    except Exception:  # noqa: BLE001 - an unreadable module: no answer
        return None
    tree = module_tree(located[0]) if located is not None and located[0].is_file() else None
    if tree is None:
        return None
    for stmt in tree.body:
        if not isinstance(stmt, ast.FunctionDef) or stmt.name != name:
            continue
        args = stmt.args
        if args.posonlyargs or args.args or args.kwonlyargs or args.vararg or args.kwarg:
            return None
        body = [s for s in stmt.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        if len(body) != 1 or not isinstance(body[0], ast.Return) or not isinstance(body[0].value, ast.Call):
            return None
        call = body[0].value
        if len(call.args) != 1 or call.keywords:
            return None
        memo[key] = str_value(call.args[0])
        return memo[key]
    return None
