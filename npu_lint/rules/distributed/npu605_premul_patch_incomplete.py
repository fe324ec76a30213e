"""NPU605 premul-patch-incomplete."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule

# the collectives FSDP2 sends a PREMUL_SUM op through: the gradient reduce-scatter, and the all-reduce of HSDP
_FSDP_COLLECTIVES = ("reduce_scatter_tensor", "all_reduce")
_REDUCING = {"all_reduce", "reduce_scatter", "reduce_scatter_tensor", "reduce", "_reduce_scatter_base"}


def _patched(func: ast.AST) -> dict[str, ast.AST]:
    """``torch.distributed.<collective> = ...`` / ``dist.<collective> = ...`` assignments in ``func``."""
    out: dict[str, ast.AST] = {}
    for sub in ast.walk(func):
        if isinstance(sub, ast.Assign):
            for target in sub.targets:
                if isinstance(target, ast.Attribute) and target.attr in _REDUCING:
                    owner = target.value
                    text = ast.unparse(owner)
                    if text in (
                        "torch.distributed",
                        "dist",
                        "distributed",
                        "torch.distributed.distributed_c10d",
                    ):
                        out.setdefault(target.attr, sub)
        elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id == "setattr":
            if (
                len(sub.args) >= 2
                and isinstance(sub.args[1], ast.Constant)
                and sub.args[1].value in _REDUCING
            ):
                out.setdefault(str(sub.args[1].value), sub)
    return out


class PremulPatchIncomplete(Rule):
    code = "NPU605"
    name = "premul-patch-incomplete"
    summary = (
        "An HCCL PREMUL_SUM patch wraps some reducing collectives but not `reduce_scatter_tensor` or "
        "`all_reduce`, through which FSDP2 sends `ReduceOp.PREMUL_SUM`."
    )
    why = (
        "HCCL has no `ReduceOp.PREMUL_SUM`; NPU ports patch `torch.distributed` collectives so that a "
        "PREMUL_SUM call becomes SUM followed by a scale. FSDP2 reduce-scatters gradients with "
        "`reduce_scatter_tensor` (and all-reduces across replicas with `all_reduce`) using "
        "`ReduceOp.PREMUL_SUM(1 / factor)` whenever a module has a gradient divide factor (expert "
        "parallelism): a patch that wraps the other collectives and not these leaves exactly the calls that "
        "carry the op unpatched, and the backward fails on Ascend. A function is read as such a patch when "
        "its file names `PREMUL_SUM` and it assigns at least one reducing collective of `torch.distributed`."
    )
    bad = (
        Example(
            """
            import torch.distributed as dist
            from torch.distributed import ReduceOp


            def _sum_then_scale(fn):
                def inner(*args, **kwargs):
                    if kwargs.get("op") == ReduceOp.PREMUL_SUM:
                        kwargs["op"] = ReduceOp.SUM
                    return fn(*args, **kwargs)

                return inner


            def install_ascend_premul_fix():
                dist.all_reduce = _sum_then_scale(dist.all_reduce)
                dist.reduce_scatter = _sum_then_scale(dist.reduce_scatter)
            """,
            path="veomni/ops/platform/npu/toy_premul.py",
        ),
    )
    good = (
        Example(
            """
            import torch
            from torch.distributed import ReduceOp


            def _sum_then_scale(fn):
                def inner(*args, **kwargs):
                    if kwargs.get("op") == ReduceOp.PREMUL_SUM:
                        kwargs["op"] = ReduceOp.SUM
                    return fn(*args, **kwargs)

                return inner


            def install_ascend_premul_fix():
                for name in ("all_reduce", "reduce_scatter_tensor"):
                    setattr(torch.distributed, name, _sum_then_scale(getattr(torch.distributed, name)))
            """,
            path="veomni/ops/platform/npu/toy_premul.py",
        ),
    )
    fix_safety = "No fix: wrapping another collective is a change of the patch's scope, made by hand."
    node_types = (ast.FunctionDef,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test and "PREMUL_SUM" in ctx.source.text

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.FunctionDef)
        if any(isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef)) for p in self.ctx.parents):
            return  # nested functions are read with their outermost one
        if self._loops_over_names(node):
            return  # `for name in (...): setattr(...)`: which collectives is not literal here
        patched = _patched(node)
        if not patched:
            return
        missing = [name for name in _FSDP_COLLECTIVES if name not in patched]
        if not missing:
            return
        done = ", ".join(f"`{n}`" for n in sorted(patched))
        lacking = " and ".join(f"`{n}`" for n in missing)
        self.report(
            node,
            f"`{node.name}` patches {done} for PREMUL_SUM but not {lacking}, which FSDP2 sends "
            "`ReduceOp.PREMUL_SUM` through when a module has a gradient divide factor: those calls still reach "
            "HCCL with the op it lacks; wrap them too",
        )

    @staticmethod
    def _loops_over_names(func: ast.FunctionDef) -> bool:
        return any(
            isinstance(sub, ast.Call)
            and isinstance(sub.func, ast.Name)
            and sub.func.id == "setattr"
            and len(sub.args) >= 2
            and not isinstance(sub.args[1], ast.Constant)
            for sub in ast.walk(func)
        )
