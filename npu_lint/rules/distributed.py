"""NPU6xx: distributed code. Collectives that HCCL does not support, and raw process-group queries in model
code where VeOmni's parallel state (``veomni.distributed.parallel_state.get_parallel_state()``) has the value."""

from __future__ import annotations

import ast
from pathlib import PurePath

from npu_lint.diagnostics import Applicability, Edit, Fix
from npu_lint.rules.base import Context, Example, Rule, make_fix

_COLLECTIVES = {
    # name -> (index of the result tensor, positional index of op, positional index of group)
    "all_reduce": (0, 1, 2),
    "reduce_scatter_tensor": (0, 2, 3),
    "reduce_scatter": (0, 2, 3),
}


def _pure(node: ast.AST | None) -> bool:
    """A Name/Attribute/Subscript chain of names and constants: evaluating it twice is harmless."""
    if node is None:
        return True
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Name):
        return True
    if isinstance(node, ast.Attribute):
        return _pure(node.value)
    if isinstance(node, ast.Subscript):
        return _pure(node.value) and _pure(node.slice)
    return False


def _arg(call: ast.Call, name: str, index: int) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    return call.args[index] if len(call.args) > index else None


class ReduceOpAvg(Rule):
    code = "NPU601"
    name = "reduce-op-avg"
    summary = "`ReduceOp.AVG` is not supported by HCCL, the collective backend on Ascend NPUs."
    why = (
        "NCCL implements `ReduceOp.AVG` natively; HCCL does not, so an `all_reduce(..., op=ReduceOp.AVG)` that "
        "trains on GPUs fails on NPUs. The portable spelling reduces with `SUM` and divides by the size of the "
        "group that took part: `dist.all_reduce(t, op=ReduceOp.SUM, group=g)` then "
        "`t.div_(dist.get_world_size(g))`."
    )
    bad = (
        Example(
            """
            import torch.distributed as dist


            def average_loss(loss, group=None):
                dist.all_reduce(loss, op=dist.ReduceOp.AVG, group=group)
                return loss
            """,
            fixed="""
            import torch.distributed as dist


            def average_loss(loss, group=None):
                dist.all_reduce(loss, op=dist.ReduceOp.SUM, group=group)
                loss.div_(dist.get_world_size(group))
                return loss
            """,
            title="an all-reduce statement",
        ),
        Example(
            """
            import torch.distributed as dist
            from torch.distributed import ReduceOp


            def average(grads):
                work = dist.all_reduce(grads, op=ReduceOp.AVG, async_op=True)
                return work
            """,
            title="asynchronous: display-only (the division must follow `work.wait()`)",
        ),
    )
    good = (
        Example(
            """
            import torch.distributed as dist


            def average_loss(loss, group=None):
                dist.all_reduce(loss, op=dist.ReduceOp.SUM, group=group)
                loss.div_(dist.get_world_size(group))
                return loss
            """
        ),
    )
    fix_safety = (
        "Safe when the collective is a synchronous statement of its own (`dist.all_reduce(...)`, "
        "`reduce_scatter_tensor(...)`) whose result tensor and group are plain names or attributes: `AVG` "
        "becomes `SUM` and `<result>.div_(<module>.get_world_size(<group>))` is added on the next line, which "
        "is what AVG computes (floating-point tensors; AVG on integer tensors is not portable either). "
        "Display-only otherwise (asynchronous calls, expressions, `ReduceOp.AVG` held in a variable)."
    )
    precision = (
        "No findings in veomni 0.1.12 `veomni/models` (VeOmni already reduces with SUM); measured on the "
        "rule's examples and fixtures only. The match is exact (`ReduceOp.AVG` resolved through imports)."
    )
    node_types = (ast.Attribute,)

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        text = ctx.source.text
        if not any(word in text for word in ("AVG",)):
            self.node_types = ()  # only `<...>.AVG` is checked

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Attribute)
        ctx = self.ctx
        if node.attr != "AVG":
            return
        owner = ctx.qualname(node.value) or ""
        if not owner.endswith("ReduceOp"):
            return
        prefix = ctx.source.segment(node.value)
        message = (
            "`ReduceOp.AVG` is not supported by HCCL on NPU; reduce with `SUM` and divide by the group size"
        )
        fix = self._fix(node, prefix)
        self.report(node, message, fix)

    def _fix(self, node: ast.Attribute, prefix: str) -> Fix | None:
        ctx = self.ctx
        parents = ctx.parents
        call = parents[-1] if parents else None
        if isinstance(call, ast.keyword):
            call = parents[-2] if len(parents) >= 2 else None
        title = "Reduce with SUM, then divide by the group size"
        if not isinstance(call, ast.Call):
            return None
        name = (ctx.qualname(call.func) or "").split(".")[-1]
        if name not in _COLLECTIVES:
            return None
        result_i, op_i, group_i = _COLLECTIVES[name]
        if _arg(call, "op", op_i) is not node:
            return None
        async_op = _arg(call, "async_op", group_i + 1)
        stmt = parents[-2] if isinstance(parents[-1], ast.Call) else parents[-3]
        result = call.args[result_i] if len(call.args) > result_i else None
        group = _arg(call, "group", group_i)
        if (
            not (async_op is None or (isinstance(async_op, ast.Constant) and async_op.value is False))
            or not isinstance(stmt, ast.Expr)
            or stmt.value is not call
            or result is None
            or not _pure(result)
            or not _pure(group)
            or not self._own_line(stmt)
        ):
            reason = "not a synchronous collective statement of its own: divide after the reduction completes"
            return make_fix(title, [], Applicability.DISPLAY, reason)
        edits: list[Edit] = []
        if isinstance(call.func, ast.Attribute):
            world = f"{ctx.source.segment(call.func.value)}.get_world_size"
        else:
            import_edits = ctx.import_edits("torch.distributed", "get_world_size")
            edits.extend(import_edits)
            world = "get_world_size"
        group_text = "" if group is None else ctx.source.segment(group)
        indent = ctx.source.line_indent(stmt.lineno)
        end = ctx.source.node_range(stmt)[1]
        division = f"\n{indent}{ctx.source.segment(result)}.div_({world}({group_text}))"
        edits.append(ctx.replace(node, f"{prefix}.SUM"))
        edits.append(Edit(end, end, division))
        return make_fix(title, edits)

    def _own_line(self, stmt: ast.stmt) -> bool:
        src = self.ctx.source
        first = src.line_text(stmt.lineno)
        if first[: len(first) - len(first.lstrip())] != first[: src.char_col(stmt.lineno, stmt.col_offset)]:
            return False
        last_line = stmt.end_lineno or stmt.lineno
        tail = src.line_text(last_line)[src.char_col(last_line, stmt.end_col_offset or 0) :].strip()
        return not tail or tail.startswith("#")


# parallel-state group attribute -> (size field, rank field)
_GROUP_FIELDS = {
    "sp_group": ("sp_size", "sp_rank"),
    "ulysses_group": ("ulysses_size", "ulysses_rank"),
    "cp_group": ("cp_size", "cp_rank"),
    "dp_group": ("dp_size", "dp_rank"),
    "fsdp_group": ("fsdp_size", "fsdp_rank"),
    "ep_group": ("ep_size", "ep_rank"),
    "dp_shard_group": ("dp_shard_size", "dp_shard_rank"),
    "dp_replicate_group": ("dp_replicate_size", "dp_replicate_rank"),
}
_GROUP_GETTERS = {"get_ulysses_sequence_parallel_group": "ulysses_group"}


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
    precision = (
        "veomni 0.1.12 `veomni/models`: 6 findings, 6 true positives (1.0): global rank/world size and the "
        "Ulysses group size/rank, each a field of the parallel state. Reviewed by hand: bench/accuracy/device.md."
    )
    node_types = (ast.Call,)

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        text = ctx.source.text
        if not any(word in text for word in ("get_rank", "get_world_size")):
            self.node_types = ()  # only get_rank() / get_world_size() calls are checked

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        parts = PurePath(ctx.source.path.replace("\\", "/")).parts
        kind = ctx.source.kind
        return kind.model_code and ("models" in parts[:-1] or kind.spec or kind.generated)

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
            size, rank = _GROUP_FIELDS[attr]
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
        if isinstance(group, ast.Attribute) and group.attr in _GROUP_FIELDS:
            owner = group.value
            if isinstance(owner, ast.Call) and (ctx.dotted(owner.func) or "").endswith("get_parallel_state"):
                return group.attr
            if isinstance(owner, ast.Name) and self._is_parallel_state_name(owner.id):
                return group.attr
            return None
        if isinstance(group, ast.Call) and not group.args:
            name = (ctx.dotted(group.func) or "").split(".")[-1]
            return _GROUP_GETTERS.get(name)
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
