"""NPU607 rank-slice-view."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import last_name
from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (faster)
from npu_lint.core.diagnostics import Applicability, Edit
from npu_lint.rules.base import Context, Example, Rule, make_fix
from npu_lint.rules.distributed._shared import is_rank_slice, rank_names


def _is_function_class(node: ast.AST) -> bool:
    return isinstance(node, ast.ClassDef) and any(
        (last_name(base) or "") == "Function" for base in node.bases
    )


def _first_dim(node: ast.AST) -> bool:
    """A slice along dimension 0 (``w.narrow(0, rank * n, n)``, ``v[rank * n:(rank + 1) * n]``,
    ``t.chunk(k)[rank]``): rows of a parameter or a metadata vector, whose view is what the caller wants (the
    gradient flows to the shared weight); a sequence is sliced along its sequence dimension."""
    if isinstance(node, ast.Call):  # narrow(dim, start, length)
        dim = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "dim"), None)
        return isinstance(dim, ast.Constant) and dim.value == 0
    assert isinstance(node, ast.Subscript)
    value = node.value
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):  # x.chunk(k, dim)[rank]
        dim = (
            value.args[1]
            if len(value.args) > 1
            else next((k.value for k in value.keywords if k.arg == "dim"), None)
        )
        return dim is None or (isinstance(dim, ast.Constant) and dim.value == 0)
    return isinstance(node.slice, ast.Slice)


class RankSliceView(Rule):
    code = "NPU607"
    name = "rank-slice-view"
    summary = (
        "A function hands out this rank's slice of a tensor with `.contiguous()` as if it were a copy: when "
        "the slice is already contiguous it is a view sharing the whole tensor's storage."
    )
    why = (
        "Sequence parallelism gives each rank its part of the full sequence (`x[..., start:end]`, "
        "`x.narrow(dim, rank * n, n)`, `x.chunk(world)[rank]`). `.contiguous()` copies only a non-contiguous "
        "slice: a slice that is already contiguous (along the first non-trivial dimension, or with a batch of one) "
        "comes back as the same view, still holding the full tensor's storage and its offset. The rank then "
        "keeps every rank's activations alive, and an in-place write or a storage-level check downstream "
        "(activation recompute on Ascend trips a stride/storage error on such views) sees the whole tensor. "
        "`.clone()` gives the slice its own storage in both cases. Inside a `torch.autograd.Function` forward the "
        "view is autograd's business, and a slice along dimension 0 (rows of a weight or a per-head vector, whose "
        "view the caller wants) is not reported."
    )
    bad = (
        Example(
            """
            import torch.distributed as dist


            def shard_sequence(x, dim, group):
                world, rank = dist.get_world_size(group), dist.get_rank(group)
                chunk = x.size(dim) // world
                return x.narrow(dim, rank * chunk, chunk).contiguous()
            """,
            fixed="""
            import torch.distributed as dist


            def shard_sequence(x, dim, group):
                world, rank = dist.get_world_size(group), dist.get_rank(group)
                chunk = x.size(dim) // world
                return x.narrow(dim, rank * chunk, chunk).clone()
            """,
            path="veomni/distributed/sequence_parallel/toy_data.py",
        ),
        Example(
            """
            def take_local_tokens(input_ids, sp_rank, sp_size):
                bounds = [slice(None)] * input_ids.dim()
                unit = input_ids.size(-1) // sp_size
                bounds[-1] = slice(unit * sp_rank, unit * (sp_rank + 1))
                local = input_ids[tuple(bounds)].contiguous()
                return local
            """,
            fixed="""
            def take_local_tokens(input_ids, sp_rank, sp_size):
                bounds = [slice(None)] * input_ids.dim()
                unit = input_ids.size(-1) // sp_size
                bounds[-1] = slice(unit * sp_rank, unit * (sp_rank + 1))
                local = input_ids[tuple(bounds)].clone()
                return local
            """,
            path="veomni/data/toy_sp.py",
            title="through an index tuple built from the rank, returned through a local",
        ),
    )
    good = (
        Example(
            """
            import torch
            import torch.distributed as dist


            def shard_sequence(x, dim, group):
                rank = dist.get_rank(group)
                return x.chunk(dist.get_world_size(group), dim=dim)[rank].clone()


            class _Split(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x, dim, group):
                    ctx.dim, ctx.group = dim, group
                    rank = dist.get_rank(group)
                    return x.chunk(dist.get_world_size(group), dim=dim)[rank].contiguous()


            def head_block(q, start, end):
                return q[:, start:end].contiguous()


            def local_head_scales(scales, local_heads, group):
                start = dist.get_rank(group) * local_heads
                return scales.narrow(0, start, local_heads).contiguous()
            """,
            path="veomni/distributed/sequence_parallel/toy_data.py",
            title="a clone; an autograd function's forward; a slice that is not this rank's; rows of a weight",
        ),
    )
    fix_safety = (
        "Unsafe: `.contiguous()` becomes `.clone()`, which also copies a slice that was already contiguous "
        "(the memory of one rank's part)."
    )
    requires = ("contiguous", "rank")
    node_types = (ast.Return,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Return)
        func = self.ctx.function
        if func is None or node.value is None:
            return
        parents = self.ctx.parents
        index = next((i for i in range(len(parents) - 1, -1, -1) if parents[i] is func), None)
        if index and _is_function_class(parents[index - 1]) and func.name == "forward":
            return
        value: ast.AST = node.value
        if isinstance(value, ast.Name):  # ``local = x[...].contiguous(); return local``
            bound = [
                s
                for s in _walk(func)
                if isinstance(s, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == value.id for t in s.targets)
            ]
            if len(bound) != 1:
                return
            value = bound[0].value
        if not (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Attribute)
            and value.func.attr == "contiguous"
            and not value.args
            and not value.keywords
        ):
            return
        sliced = value.func.value
        if not is_rank_slice(sliced, rank_names(func)) or _first_dim(sliced):
            return
        src = self.ctx.source
        end = src.node_range(value)[1]
        start = end - len(src.segment(value)) + len(src.segment(value.func.value))
        fix = make_fix(
            "Replace `.contiguous()` with `.clone()`",
            [Edit(start, end, ".clone()")],
            Applicability.UNSAFE,
            "copies the slice also where it was already contiguous",
        )
        self.report(
            value,
            "this rank's slice is handed out with `.contiguous()`, which returns the slice itself (a view of the "
            "whole tensor's storage) whenever it is already contiguous; use `.clone()` so the rank's part owns "
            "its storage (a shared view keeps every rank's data alive and trips storage/stride checks under "
            "recompute on Ascend)",
            fix,
        )
