"""NPU602 raw-distributed-api."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.distributed._shared import GROUP_FIELDS, GROUP_GETTERS
from npu_lint.veomni.layout import in_model_layout


class RawDistributedApi(Rule):
    code = "NPU602"
    name = "raw-distributed-api"
    summary = "Model code asks `torch.distributed` for a rank or world size that VeOmni's parallel state already holds."
    why = (
        "VeOmni keeps the process topology in one place, `get_parallel_state()` "
        "(`veomni.distributed.parallel_state`): `global_rank`, `world_size`, and per-dimension `*_rank` / "
        "`*_size` / `*_group` (sp, ulysses, cp, dp, fsdp, ep). Model code that calls `dist.get_rank()` / "
        "`dist.get_world_size(group)` directly bypasses it (per-module parallel states under "
        "`use_parallel_state`, single-process runs where no process group exists) and scatters topology "
        "queries that a port to another backend has to audit. Only calls whose value the parallel state "
        "provides are reported: no group (the global rank/size), or a group that comes from the parallel state."
    )
    bad = (
        Example(
            """
            import torch.distributed as dist
            from veomni.distributed.parallel_state import get_parallel_state


            def shard(hidden_states):
                group = get_parallel_state().ulysses_group
                world = dist.get_world_size(group)
                if dist.get_rank() == 0:
                    print(hidden_states.shape)
                return hidden_states.chunk(world, dim=1)
            """,
            title="rank and group size",
        ),
    )
    good = (
        Example(
            """
            import torch.distributed as dist
            from veomni.distributed.parallel_state import get_parallel_state


            def shard(hidden_states, custom_group):
                world = get_parallel_state().ulysses_size
                local = dist.get_world_size(custom_group)  # a group the parallel state does not own
                return hidden_states.chunk(world * local, dim=1)
            """
        ),
    )
    fix_safety = (
        "No fix: `get_parallel_state()` answers differently from `torch.distributed` when no process group is "
        "initialised (rank -1 / size 1 instead of an error), so the switch is left to the author."
    )
    requires = (("get_rank", "get_world_size"),)  # only get_rank() / get_world_size() calls are checked
    node_types = (ast.Call,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        kind = ctx.source.kind
        if not kind.model_code:
            return False
        if kind.spec or kind.generated:
            return True
        project = ctx.project  # model code of the tree, in any layout (npu_lint.veomni.layout)
        return in_model_layout(ctx.source.path, project.root, project.api.layouts)

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Call)
        ctx = self.ctx
        func = node.func
        if type(func) is ast.Attribute and func.attr not in ("get_rank", "get_world_size"):
            return  # the qualname below ends with the attribute
        qual = ctx.qualname(func) or ""
        if qual not in ("torch.distributed.get_rank", "torch.distributed.get_world_size"):
            return
        which = qual.rsplit(".", 1)[1]
        group = (
            node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "group"), None)
        )
        if (
            group is None
            or (isinstance(group, ast.Constant) and group.value is None)
            or ((ctx.qualname(group) or "") == "torch.distributed.group.WORLD")
        ):
            field = "global_rank" if which == "get_rank" else "world_size"
        else:
            attr = self._group_attr(group)
            if attr is None:
                return
            size, rank = GROUP_FIELDS[attr]
            field = rank if which == "get_rank" else size
        call = ctx.source.segment(node)
        self.report(
            node,
            f"`{call}`: VeOmni's parallel state has this value; use `get_parallel_state().{field}` "
            "(veomni.distributed.parallel_state)",
        )

    def _group_attr(self, group: ast.AST, depth: int = 0) -> str | None:
        """The parallel-state group attribute ``group`` evaluates to, if it provably comes from there."""
        ctx = self.ctx
        if isinstance(group, ast.Attribute) and group.attr in GROUP_FIELDS:
            owner = group.value
            if isinstance(owner, ast.Call) and (ctx.dotted(owner.func) or "").endswith("get_parallel_state"):
                return group.attr
            if isinstance(owner, ast.Name) and self._is_parallel_state_name(owner.id):
                return group.attr
            return None
        if isinstance(group, ast.Call) and not group.args:
            name = (ctx.dotted(group.func) or "").split(".")[-1]
            return GROUP_GETTERS.get(name)
        if isinstance(group, ast.Name) and depth == 0:
            values = self._assignments(group.id)
            found = set()
            for value in values:
                if isinstance(value, ast.IfExp):
                    branches = [
                        b
                        for b in (value.body, value.orelse)
                        if not (isinstance(b, ast.Constant) and b.value is None)
                    ]
                else:
                    branches = [value]
                for branch in branches:
                    found.add(self._group_attr(branch, depth + 1))
            if len(found) == 1 and None not in found:
                return found.pop()
        return None

    def _assignments(self, name: str) -> list[ast.expr]:
        func = self.ctx.function
        if func is None:
            return []
        return [
            n.value
            for n in ast.walk(func)
            if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)
        ]

    def _is_parallel_state_name(self, name: str) -> bool:
        values = self._assignments(name)
        return bool(values) and all(
            isinstance(v, ast.Call) and (self.ctx.dotted(v.func) or "").endswith("get_parallel_state")
            for v in values
        )
