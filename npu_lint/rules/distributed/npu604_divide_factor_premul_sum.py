"""NPU604 divide-factor-premul-sum."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.collectives import read_premul_patches

_SETTERS = {"set_gradient_divide_factor", "set_reduce_scatter_divide_factor"}


def _patches(root: str) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """Read per file that sets a divide factor (a handful per tree), never cached: the patch and its callers
    live in other files, which may change between runs of a long-lived process (the language server)."""
    return read_premul_patches(Path(root))


class DivideFactorPremulSum(Rule):
    code = "NPU604"
    name = "divide-factor-premul-sum"
    summary = (
        "FSDP2 is given a gradient divide factor (it then reduce-scatters with `ReduceOp.PREMUL_SUM`) but the "
        "tree's HCCL PREMUL_SUM patch is never applied."
    )
    why = (
        "`fully_shard` modules given `set_gradient_divide_factor(f)` / `set_reduce_scatter_divide_factor(f)` "
        "(expert-parallel modules, whose gradients are averaged over another group than their shards) "
        "reduce-scatter with `ReduceOp.PREMUL_SUM(1 / f)` when f is not the group size. NCCL has that op; "
        "HCCL does not, so the first backward of an expert-parallel run on Ascend fails. NPU ports install a "
        "patch of the collectives (SUM, then scale by the factor) before sharding. The rule looks for that "
        "patch in the tree (a function outside the model packages that names `PREMUL_SUM` and assigns a "
        "`torch.distributed` collective) and reports a divide-factor call when nothing in the tree calls it, "
        "naming it; with no such patch in the tree it says so."
    )
    bad = (
        Example(
            """
            def shard_experts(model, ep_size):
                for block in model.layers:
                    block.mlp.experts.set_gradient_divide_factor(ep_size)
            """,
            path="veomni/distributed/toy_parallelize.py",
            title="no patch in sight (outside a VeOmni tree)",
        ),
    )
    good = (
        Example(
            """
            from veomni.ops.platform.npu import apply_hccl_premul_sum_patch
            from veomni.utils.device import IS_NPU_AVAILABLE


            def shard_experts(model, ep_size):
                if IS_NPU_AVAILABLE:
                    apply_hccl_premul_sum_patch()
                for block in model.layers:
                    block.mlp.experts.set_reduce_scatter_divide_factor(ep_size)
            """,
            path="veomni/distributed/toy_parallelize.py",
            title="the file applies a PREMUL_SUM patch",
        ),
    )
    fix_safety = (
        "No fix: where the patch is installed (once, before sharding, on NPU hosts) is the caller's choice."
    )
    node_types = (ast.Call,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        """Model code and the tree's own platform code (``veomni/ops/platform/npu`` holds the HCCL patches):
        anything but tests."""
        return not ctx.source.kind.test

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        if "divide_factor" not in ctx.source.text:
            self.node_types = ()
        self.done = False

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Call)
        func = node.func
        if self.done or not isinstance(func, ast.Attribute) or func.attr not in _SETTERS:
            return
        text = self.ctx.source.text
        root = self.ctx.project.root
        patches = _patches(root) if root else ()
        if patches:
            if any(p[2] for p in patches):
                return  # the tree applies its patch somewhere
            names = [f"`{name}` ({where})" for name, where, _callers in patches]
            if any(re.search(rf"(?<![\w.]){re.escape(name)}\(", text) for name, _w, _c in patches):
                return
            advice = f"this tree's patch {', '.join(names)} is called nowhere: apply it on NPU hosts before sharding"
        else:
            if "PREMUL_SUM" in text or "premul" in text.lower():
                return  # the file handles the op itself
            advice = (
                "this tree has no PREMUL_SUM patch of the collectives: install one on NPU hosts before sharding "
                "(reduce with SUM, then scale by the factor)"
            )
        self.done = True  # once per file: one patch serves every call
        self.report(
            node,
            f"`{func.attr}(...)` makes FSDP2 reduce-scatter with `ReduceOp.PREMUL_SUM`, which HCCL does not "
            f"support; {advice}",
        )
