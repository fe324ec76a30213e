"""Helpers shared by the rules of the distributed family (private to it)."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import call_arg

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
