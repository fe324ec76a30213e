"""NPU310 kernel-result-dropped."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import own_nodes
from npu_lint.rules.base import Context, Example, Rule

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _bound_names(stmt: ast.stmt) -> list[str] | None:
    """The plain local names a final assignment binds (``a, b = ...``, ``a = ...``, ``a: T = ...``), or None
    when it binds anything else (an attribute, a subscript: a store that outlives the call)."""
    if isinstance(stmt, ast.Assign):
        targets = stmt.targets
    elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        targets = [stmt.target]
    else:
        return None
    names: list[str] = []
    for target in targets:
        elts = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
        for elt in elts:
            if isinstance(elt, ast.Starred):
                elt = elt.value
            if not isinstance(elt, ast.Name):
                return None
            names.append(elt.id)
    return names


class KernelResultDropped(Rule):
    code = "NPU310"
    name = "kernel-result-dropped"
    summary = (
        "A function (a kernel wrapper, an NPU implementation, a patched method) ends by computing values it "
        "never returns: every caller gets `None`."
    )
    why = (
        "Kernel wrappers are swapped for each other by the dispatch (eager, Triton, Liger, `torch_npu`): each "
        "implementation of an op must hand back what the others do. A wrapper whose last statement binds "
        "locals (`q_embed, k_embed = q_embed.squeeze(0), k_embed.squeeze(0)`) and that has no `return` falls off "
        "the end and returns `None`; the callers' `q, k = apply_rotary(...)` fails only on the device that "
        "selects this implementation (the Ascend row), while the GPU path keeps working. The check reads "
        "functions with no `return` of a value, no `yield`, and a final statement that binds plain local names "
        "(nothing can read them after it), other than the function's own parameters (`model = convert(model)` after "
        "an in-place conversion): on VeOmni's two trees and transformers 5.9.0 that shape occurs only in "
        "transformers' `modular_*.py` files, whose partial bodies the converter completes, and which are not read."
    )
    bad = (
        Example(
            """
            import torch_npu


            def apply_rotary_npu(q, k, cos, sin):
                q_embed = torch_npu.npu_rotary_mul(q, cos, sin)
                k_embed = torch_npu.npu_rotary_mul(k, cos, sin)
                q_embed, k_embed = q_embed.contiguous(), k_embed.contiguous()
            """,
            path="veomni/ops/kernels/rotary/npu.py",
            title="the rotated q/k computed, never returned",
        ),
    )
    good = (
        Example(
            """
            import torch_npu


            def apply_rotary_npu(q, k, cos, sin):
                q_embed = torch_npu.npu_rotary_mul(q, cos, sin)
                k_embed = torch_npu.npu_rotary_mul(k, cos, sin)
                return q_embed.contiguous(), k_embed.contiguous()


            def fill_cache(cache, key, value):
                cache[key] = value
            """,
            path="veomni/ops/kernels/rotary/npu.py",
        ),
    )
    fix_safety = "No fix: which values the wrapper should return is the op's contract."
    node_types = _FUNCS

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        kind = ctx.source.kind
        if kind.test:
            return False
        # transformers' modular files hold partial bodies on purpose (the converter completes them)
        return not ctx.source.path.replace("\\", "/").rsplit("/", 1)[-1].startswith("modular_")

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, _FUNCS)
        if node.name == "__init__" or not node.body or node.returns is not None and _is_none(node.returns):
            return
        last = node.body[-1]
        names = _bound_names(last)
        if not names or all(n == "_" for n in names):
            return
        args = node.args
        params = {
            a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg) if a
        }
        if params.issuperset(names):
            return  # ``model = convert(model)``: a parameter rebound to what mutated it in place
        if node.name.startswith("__") or node.name.lower().startswith(_DRIVERS):
            return  # entry points and harnesses (`main`, `warmup`, `benchmark`, `__post_init__`) compute for effect
        path = self.ctx.source.path.replace("\\", "/")
        # an op's implementation: a forward, a patch spec's replacement, code of the ops tree, or a tensor kernel call
        computes = "forward" in node.name or path.endswith("_patch_gen_config.py") or "/ops/" in path
        for inner in own_nodes(node):
            if isinstance(inner, (ast.Yield, ast.YieldFrom, ast.Global, ast.Nonlocal)):
                return
            if isinstance(inner, ast.Return) and inner.value is not None:
                return
            if isinstance(inner, ast.Call) and not computes:
                qual = self.ctx.qualname(inner.func) or ""
                computes = qual.startswith(_KERNEL_ROOTS) and not qual.startswith(_EFFECT_ROOTS)
        if not computes:
            return  # no tensor kernel is called: not an implementation of an op
        self.report(
            last,
            f"`{node.name}` ends by binding `{', '.join(names)}` and returns nothing: callers of this "
            "implementation get `None` (the other implementations of the op return their results).",
        )


_DRIVERS = ("main", "bench", "warmup", "test", "run", "setup", "profile", "train", "eval")
_KERNEL_ROOTS = ("torch.", "torch_npu.", "triton.")
_EFFECT_ROOTS = (
    "torch.cuda.",
    "torch.npu.",
    "torch.distributed.",
    "torch.utils.",
    "torch.manual_seed",
    "torch.save",
)


def _is_none(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value is None
