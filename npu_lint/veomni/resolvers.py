"""Zero-argument implementation resolvers a tree defines on top of its ops-config resolver (NPU204).

The VeomniOp tree wraps ``resolve_op_impl("moe_implementation")`` in ``resolve_moe_impl()``; a handle built with
the wrapper reads the wrapper's field. ``wrapped_field(index, module, name)`` reads the wrapper's body from the
tree (statically, through the run's one store of parsed files) and answers the literal field it resolves, or
None when it is not such a wrapper (a docstring and one ``return <call>("<field>")``).
"""

from __future__ import annotations

import ast
import os

from npu_lint.core.astutil import str_value
from npu_lint.veomni.imports import ModuleIndex, module_tree


def wrapped_field(index: ModuleIndex, module: str, name: str) -> str | None:
    """The ops-config field the tree's zero-argument function ``name`` (imported from ``module``) resolves."""
    try:
        origin = index.origin(module, name)
        located = index.module_path(origin) if origin else None
    except Exception:  # noqa: BLE001 - an unreadable module: no answer
        return None
    if located is None or not located[0].is_file():
        return None
    try:
        st = os.stat(located[0])
    except OSError:
        return None
    # keyed by the module file's state (as the store of parsed files is): an edited resolver is read again
    memo: dict[tuple[str, str, int, int, int], str | None] = index.__dict__.setdefault("_wrapped_fields", {})
    key = (str(located[0]), name, st.st_mtime_ns, st.st_size, st.st_ino)
    if key not in memo:
        memo[key] = _field(module_tree(located[0]), name)
    return memo[key]


def _field(tree: ast.Module | None, name: str) -> str | None:
    """The literal field the module function ``name`` of ``tree`` resolves (see ``wrapped_field``)."""
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
        return str_value(call.args[0])
    return None
