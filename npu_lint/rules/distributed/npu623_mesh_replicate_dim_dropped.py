"""NPU623 mesh-replicate-dim-dropped."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule

_SUFFIX = "_fsdp"
# uses of the sliced mesh that only ask about the shard dimension itself (its size, group or rank)
_QUERIES = frozenset(
    {"size", "get_group", "get_local_rank", "get_coordinate", "get_rank", "mesh_dim_names", "ndim"}
)


def _shard_dim_key(key: ast.AST) -> bool:
    """A single ``<para>_fsdp`` dimension name: ``"ep_fsdp"``, ``f"{para}_fsdp"``, ``name + "_fsdp"``."""
    if isinstance(key, ast.Constant) and isinstance(key.value, str):
        return key.value.endswith(_SUFFIX) and key.value != _SUFFIX.lstrip("_")
    if isinstance(key, ast.JoinedStr) and key.values:
        last = key.values[-1]
        return isinstance(last, ast.Constant) and isinstance(last.value, str) and last.value.endswith(_SUFFIX)
    if isinstance(key, ast.BinOp) and isinstance(key.op, ast.Add):
        right = key.right
        return (
            isinstance(right, ast.Constant) and isinstance(right.value, str) and right.value.endswith(_SUFFIX)
        )
    return False


class MeshReplicateDimDropped(Rule):
    code = "NPU623"
    name = "mesh-replicate-dim-dropped"
    summary = (
        "An extra-parallel (expert) FSDP mesh is sliced to its single `<para>_fsdp` dimension and used to shard "
        "parameters or to place checkpoint tensors: under HSDP the `<para>_replicate` dimension is dropped."
    )
    why = (
        "With HSDP VeOmni builds each extra-parallel mesh as (`ep_replicate`, `ep_fsdp`, `ep`): the FSDP part of "
        "it is the two leading dimensions, not `ep_fsdp` alone. Sharding expert modules on the 1-D `ep_fsdp` "
        "slice means their gradients are never reduced across the replicas (the expert weights of the replica "
        "groups drift apart while the dense layers stay in sync), and rebuilding checkpoint DTensors on it saves "
        "and reloads expert shards with a placement that ignores the replicas. Take every dimension but the "
        "extra-parallel one (`mesh[mesh.mesh_dim_names[:-1]]`), which is 1-D without HSDP and 2-D with it. "
        "Asking the shard dimension itself for its size, group or rank (`mesh['ep_fsdp'].size()`, a grad-norm "
        "reduce group, where replicas must not be counted) is correct and not reported."
    )
    bad = (
        Example(
            """
            from torch.distributed.fsdp import fully_shard


            def shard_experts(model, ps, kwargs):
                for name in ps.extra_parallel_names:
                    expert_mesh = ps.extra_parallel_fsdp_device_mesh[name]
                    kwargs["mesh"] = expert_mesh[name + "_fsdp"]
                    fully_shard(model.experts, **kwargs)
            """,
            path="veomni/distributed/toy_parallelize.py",
            title="experts sharded on the ep_fsdp slice alone",
        ),
    )
    good = (
        Example(
            """
            from torch.distributed.fsdp import fully_shard


            def shard_experts(model, ps, kwargs):
                for name in ps.extra_parallel_names:
                    expert_mesh = ps.extra_parallel_fsdp_device_mesh[name]
                    kwargs["mesh"] = expert_mesh[expert_mesh.mesh_dim_names[:-1]]
                    width = expert_mesh[name + "_fsdp"].size()
                    fully_shard(model.experts, **kwargs)
                return width
            """,
            path="veomni/distributed/toy_parallelize.py",
            title="every dimension but the extra-parallel one; the shard dim's size",
        ),
    )
    fix_safety = "No fix: the slice must keep the replicate dimension; rewrite it with the mesh's dim names."
    requires = ("_fsdp", "mesh")
    node_types = (ast.Subscript,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Subscript)
        if not isinstance(node.ctx, ast.Load) or not _shard_dim_key(node.slice):
            return
        owner = ast.unparse(node.value).lower()
        if "mesh" not in owner:
            return
        parent = self.ctx.parents[-1] if self.ctx.parents else None
        if isinstance(parent, ast.Attribute) and parent.attr in _QUERIES:
            return
        used = False
        if isinstance(parent, ast.Call) and node is not parent.func:
            whole = ast.unparse(node.value)
            given = [*parent.args, *(k.value for k in parent.keywords)]
            if any(a is not node and ast.unparse(a) == whole for a in given):
                return  # the call gets the whole mesh too: it picks the dimensions it places on
            used = True  # handed to a sharding / placement call as the mesh
        elif isinstance(parent, ast.keyword) and parent.arg and "mesh" in parent.arg:
            used = True
        elif isinstance(parent, ast.Assign):
            for target in parent.targets:
                shown = ast.unparse(target).lower()
                if "mesh" in shown:
                    used = True
        if not used:
            return
        self.report(
            node,
            f"`{self.ctx.source.segment(node)}` keeps only the `{_SUFFIX[1:]}` dimension of an extra-parallel "
            "mesh: under HSDP its `_replicate` dimension is dropped, so the sharding/placement built on it ignores "
            "the replicas (expert gradients never reduced across them, checkpoint shards misplaced); take "
            "`mesh[mesh.mesh_dim_names[:-1]]`",
        )
