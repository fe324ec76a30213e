"""NPU601 reduce-op-avg."""

from __future__ import annotations

import ast

from npu_lint.core.diagnostics import Applicability, Edit, Fix
from npu_lint.rules.base import Example, Rule, make_fix
from npu_lint.rules.distributed._shared import COLLECTIVES, arg, pure


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
    requires = ("AVG",)  # only `<...>.AVG` is checked
    node_types = (ast.Attribute,)

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
        if name not in COLLECTIVES:
            return None
        result_i, op_i, group_i = COLLECTIVES[name]
        if arg(call, "op", op_i) is not node:
            return None
        async_op = arg(call, "async_op", group_i + 1)
        stmt = parents[-2] if isinstance(parents[-1], ast.Call) else parents[-3]
        result = call.args[result_i] if len(call.args) > result_i else None
        group = arg(call, "group", group_i)
        if (
            not (async_op is None or (isinstance(async_op, ast.Constant) and async_op.value is False))
            or not isinstance(stmt, ast.Expr)
            or stmt.value is not call
            or result is None
            or not pure(result)
            or not pure(group)
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
