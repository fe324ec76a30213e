"""Helpers shared by the rules of the distributed family (private to it)."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import call_arg
from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (faster)

COLLECTIVES = {
    # name -> (index of the result tensor, positional index of op, positional index of group)
    "all_reduce": (0, 1, 2),
    "reduce_scatter_tensor": (0, 2, 3),
    "reduce_scatter": (0, 2, 3),
}


def pure(node: ast.AST | None) -> bool:
    """A Name/Attribute/Subscript chain of names and constants: evaluating it twice is harmless."""
    if node is None:
        return True
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Name):
        return True
    if isinstance(node, ast.Attribute):
        return pure(node.value)
    if isinstance(node, ast.Subscript):
        return pure(node.value) and pure(node.slice)
    return False


def arg(call: ast.Call, name: str, index: int) -> ast.expr | None:
    return call_arg(call, index, name)  # core.astutil's one call_arg


# parallel-state group attribute -> (size field, rank field)
GROUP_FIELDS = {
    "sp_group": ("sp_size", "sp_rank"),
    "ulysses_group": ("ulysses_size", "ulysses_rank"),
    "cp_group": ("cp_size", "cp_rank"),
    "dp_group": ("dp_size", "dp_rank"),
    "fsdp_group": ("fsdp_size", "fsdp_rank"),
    "ep_group": ("ep_size", "ep_rank"),
    "dp_shard_group": ("dp_shard_size", "dp_shard_rank"),
    "dp_replicate_group": ("dp_replicate_size", "dp_replicate_rank"),
}
GROUP_GETTERS = {"get_ulysses_sequence_parallel_group": "ulysses_group"}


def mentions_rank(node: ast.AST) -> bool:
    for sub in _walk(node):
        if isinstance(sub, ast.Name) and "rank" in sub.id.lower():
            return True
        if isinstance(sub, ast.Attribute) and "rank" in sub.attr.lower():
            return True
    return False


def rank_names(func: ast.AST) -> set[str]:
    """Locals of ``func`` computed from the rank (``start = rank * n``, ``slc[dim] = slice(unit * sp_rank, ...)``
    makes ``slc`` one)."""
    names: set[str] = set()
    for sub in _walk(func):
        if isinstance(sub, (ast.Assign, ast.AugAssign)) and mentions_rank(sub.value):
            targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
            for target in targets:
                elts = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
                for elt in elts:
                    while isinstance(elt, (ast.Subscript, ast.Attribute)):
                        elt = elt.value
                    if isinstance(elt, ast.Name):
                        names.add(elt.id)
    return names


def is_rank_slice(node: ast.AST, names: set[str]) -> bool:
    """``x.split(n, dim)[rank]``, ``x.chunk(k)[rank]``, ``x.narrow(dim, rank * n, n)``, ``x[..., rank * n : (rank
    + 1) * n]``, ``x[tuple(slc)]`` with ``slc`` built from the rank (``names``: :func:`rank_names`)."""

    def ranked(expr: ast.AST) -> bool:
        return mentions_rank(expr) or any(
            isinstance(sub, ast.Name) and sub.id in names for sub in _walk(expr)
        )

    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and ranked(node.slice):
        value = node.value
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
            return value.func.attr in ("split", "chunk", "tensor_split", "unbind")
        if isinstance(node.slice, ast.Name):
            return node.slice.id in names
        return isinstance(node.slice, (ast.Slice, ast.Tuple, ast.Call))
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "narrow"
        and any(ranked(a) for a in node.args[1:])
    )


def rank_slice(func: ast.AST) -> ast.AST | None:
    """Where ``func`` keeps only this rank's part of a tensor (:func:`is_rank_slice`)."""
    names = rank_names(func)
    return next((sub for sub in _walk(func) if is_rank_slice(sub, names)), None)
