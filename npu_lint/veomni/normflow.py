"""Where the output of each norm submodule goes inside one function: the callees that take it as an argument
(directly, or through a name bound to it and reshaped at most). A copy of an upstream method that still calls a
callee upstream hands a normalised tensor, while handing it an un-normalised one, feeds that callee other values
(the DSA indexer given the raw `q_a_proj` output instead of the normalised query residual). Asked by NPU458."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from npu_lint.core.astutil import walk as _walk

# tensor methods that keep a tensor's values (a view, a cast): a name bound through them still holds the norm's output
_KEEP = frozenset(
    {"view", "reshape", "transpose", "contiguous", "to", "float", "flatten", "unsqueeze", "permute"}
)


def _norm_attr(node: ast.AST) -> str | None:
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "self"
        and "norm" in node.func.attr.lower()
    ):
        return node.func.attr
    return None


def _callee(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
        return f"self.{func.attr}"
    if isinstance(func, ast.Name):
        return func.id
    return None


def _strip(node: ast.AST) -> ast.AST:
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _KEEP:
        node = node.func.value
    return node


def norm_consumers(func: ast.AST) -> dict[str, set[str]]:
    """For each norm submodule the function calls: the callees handed its output."""
    normed: dict[str, str] = {}  # name -> norm attribute whose output it holds
    for node in _walk(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = _strip(node.value)
            attr = _norm_attr(value)
            if attr is None and isinstance(value, ast.Name):
                attr = normed.get(value.id)
            if attr is not None:
                normed[node.targets[0].id] = attr
    out: dict[str, set[str]] = {}
    for node in _walk(func):
        if not isinstance(node, ast.Call):
            continue
        callee = _callee(node)
        if callee is None or _norm_attr(node) is not None:
            continue
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            arg = _strip(arg)
            attr = _norm_attr(arg) or (normed.get(arg.id) if isinstance(arg, ast.Name) else None)
            if attr is not None:
                out.setdefault(attr, set()).add(callee)
    return out


def _callees(func: ast.AST) -> set[str]:
    return {c for n in _walk(func) if isinstance(n, ast.Call) and (c := _callee(n)) is not None}


def lost_consumers(mine: ast.AST, theirs: ast.AST) -> Iterator[tuple[ast.AST, str, str]]:
    """``(site, norm, callee)``: a callee upstream hands ``self.<norm>``'s output, which the copy still calls but
    no longer hands that output (the norm itself still called)."""
    up, cp = norm_consumers(theirs), norm_consumers(mine)
    called = _callees(mine)
    norms = {a for n in _walk(mine) if (a := _norm_attr(n)) is not None}
    for attr, consumers in up.items():
        if attr not in norms:
            continue  # the norm is gone: the feature comparison judges that
        for callee in sorted(consumers - cp.get(attr, set())):
            if callee not in called:
                continue
            site = next(n for n in _walk(mine) if isinstance(n, ast.Call) and _callee(n) == callee)
            yield site, attr, callee
