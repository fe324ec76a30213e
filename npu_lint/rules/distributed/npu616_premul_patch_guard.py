"""NPU616 premul-patch-guard."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import call_name, last_name
from npu_lint.core.astutil import walk as _walk
from npu_lint.rules.base import Context, Example, Rule

_DIVIDE = frozenset({"set_reduce_scatter_divide_factor", "set_gradient_divide_factor"})
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _flags(test: ast.AST) -> set[str]:
    """The condition names of a guard (attribute and variable names, calls' names), without device tests."""
    out: set[str] = set()
    for n in _walk(test):
        name = last_name(n)
        if name is None:
            continue
        low = name.lower()
        if low.endswith("_available") or "device" in low or low in ("self", "parallel_state", "ps"):
            continue
        if low.endswith(("_enabled", "_enable", "_size", "_names")) or low.startswith(("use_", "enable")):
            out.add(name)
    return out


def _guards(func: ast.AST, targets: set[int]) -> dict[int, list[ast.AST]]:
    """For each target node: the guard expressions it runs under (enclosing `if` tests, loop iterables, and
    `if ...: continue` / `break` statements earlier in an enclosing loop body)."""
    out: dict[int, list[ast.AST]] = {}

    def deep(body: list[ast.stmt], guards: list[ast.AST]) -> None:
        local = list(guards)
        for stmt in body:
            if isinstance(stmt, ast.If):
                exits = all(
                    isinstance(s, (ast.Continue, ast.Break, ast.Return, ast.Raise)) for s in stmt.body
                )
                deep(stmt.body, [*local, stmt.test])
                deep(stmt.orelse, [*local, stmt.test])
                if exits:
                    local = [*local, stmt.test]
                _record(stmt.test, local)
            elif isinstance(stmt, (ast.For, ast.AsyncFor)):
                deep(stmt.body, [*local, stmt.iter])
            elif isinstance(stmt, ast.While):
                deep(stmt.body, [*local, stmt.test])
            elif isinstance(stmt, (ast.With, ast.AsyncWith)):
                deep(stmt.body, local)
            elif isinstance(stmt, ast.Try):
                for part in (stmt.body, stmt.orelse, stmt.finalbody, *(h.body for h in stmt.handlers)):
                    deep(part, local)
            else:
                _record(stmt, local)

    def _record(node: ast.AST, guards: list[ast.AST]) -> None:
        for n in _walk(node):
            if id(n) in targets and id(n) not in out:
                out[id(n)] = guards

    deep(getattr(func, "body", []), [])
    return out


class PremulPatchGuard(Rule):
    code = "NPU616"
    name = "premul-patch-guard"
    summary = (
        "The HCCL PREMUL_SUM patch is applied under a narrower condition than the gradient divide factor that "
        "makes FSDP2 reduce with PREMUL_SUM (e.g. only with expert parallelism, while every extra-parallel "
        "module gets the factor)."
    )
    why = (
        "FSDP2 switches a module's gradient reduce-scatter to `ReduceOp.PREMUL_SUM` as soon as it has a divide "
        "factor (`set_reduce_scatter_divide_factor`, `set_gradient_divide_factor`). HCCL has no PREMUL_SUM, so "
        "on Ascend the framework patches the collectives (a `*premul*` patch function) before wrapping. The "
        "patch must run whenever some module gets a factor: guarding it with one parallel dimension's switch "
        "(`ep_enabled`) while the factor is set for every enabled extra-parallel dimension (expert, embedding, "
        "...) leaves the other dimensions' runs sending PREMUL_SUM to HCCL, which fails at the first backward. "
        "The check compares, in one function, the switches of the patch call's guard (device tests aside) with "
        "those of the divide-factor call: each switch of the patch must be one of the factor's, or the 'any' "
        "form of one (`any_extra_parallel_enabled` covers `extra_parallel_enabled(name)`)."
    )
    bad = (
        Example(
            """
            from veomni.ops.platform.npu import patch_premul_for_hccl
            from veomni.utils.device import IS_NPU_AVAILABLE


            def wrap(model, state, modules):
                if IS_NPU_AVAILABLE and state.moe_enabled:
                    patch_premul_for_hccl()
                for dim in state.parallel_dims_names:
                    if not state.dim_enabled(dim):
                        continue
                    for mod in modules[dim]:
                        mod.set_reduce_scatter_divide_factor(state.divide_factor(dim))
                return model
            """,
            path="veomni/distributed/toy_parallelize.py",
            title="the patch under one dimension's switch, the factor for every enabled dimension",
        ),
    )
    good = (
        Example(
            """
            from veomni.ops.platform.npu import patch_premul_for_hccl
            from veomni.utils.device import IS_NPU_AVAILABLE


            def wrap(model, state, modules):
                if IS_NPU_AVAILABLE and state.any_dim_enabled:
                    patch_premul_for_hccl()
                for dim in state.parallel_dims_names:
                    if not state.dim_enabled(dim):
                        continue
                    for mod in modules[dim]:
                        mod.set_reduce_scatter_divide_factor(state.divide_factor(dim))
                return model
            """,
            path="veomni/distributed/toy_parallelize.py",
            title="the patch under the 'any' form of the factor's switch",
        ),
    )
    fix_safety = "No fix: widening the patch's guard is a judgement about the parallel plan."
    requires = ("premul", "divide_factor")
    node_types = (ast.FunctionDef, ast.AsyncFunctionDef)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        calls = [n for n in _walk(node) if isinstance(n, ast.Call)]
        patches = [c for c in calls if "premul" in call_name(c).lower() and "patch" in call_name(c).lower()]
        divides = [c for c in calls if call_name(c) in _DIVIDE]
        if not patches or not divides:
            return
        guards = _guards(node, {id(c) for c in [*patches, *divides]})
        divide_flags: set[str] = set()
        for c in divides:
            for g in guards.get(id(c), []):
                divide_flags |= _flags(g)
        for patch in patches:
            patch_flags: set[str] = set()
            for g in guards.get(id(patch), []):
                patch_flags |= _flags(g)
            narrower = sorted(
                f for f in patch_flags if f not in divide_flags and not any(d in f for d in divide_flags if d)
            )
            if narrower:
                first = divides[0]
                shown = ", ".join(f"`{d}`" for d in sorted(divide_flags)) or "no switch"
                self.report(
                    patch,
                    f"`{call_name(patch)}()` runs only under `{'`, `'.join(narrower)}`, but the gradient divide "
                    f"factor that makes FSDP2 reduce with PREMUL_SUM is set at line {first.lineno} under "
                    f"{shown}: runs that set the factor without `{narrower[0]}` send PREMUL_SUM to HCCL "
                    "unpatched (guard the patch like the factor)",
                )
