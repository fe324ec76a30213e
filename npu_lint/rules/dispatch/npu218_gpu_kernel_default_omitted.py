"""NPU218 gpu-kernel-default-omitted."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import resolve_relative
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.catalog import ANY, NPU, OpRow
from npu_lint.veomni.imports import _params, _str_defaults
from npu_lint.veomni.registry import read_registry_rows


def _gpu_only_names(rows: tuple[OpRow, ...]) -> dict[str, list[OpRow]]:
    """Implementation name -> its rows, for the names no row of which an NPU host can bind."""
    by_name: dict[str, list[OpRow]] = {}
    for row in rows:
        by_name.setdefault(row.impl, []).append(row)
    return {
        name: found
        for name, found in by_name.items()
        if name != "eager" and not any(r.requirement in (NPU, ANY) for r in found)
    }


class GpuKernelDefaultOmitted(Rule):
    code = "NPU218"
    name = "gpu-kernel-default-omitted"
    summary = (
        "A call leaves out a kernel-choosing argument whose default, in the tree's definition of the function, "
        "is an implementation name the tree registers for the GPU only."
    )
    why = (
        "Kernel binders take the kernel to bind as an argument whose default is the GPU choice "
        '(`def apply_fused_patch(kernel: str = "triton")`). The caller is expected to pass what the ops config '
        "resolved for this host (on Ascend, the NPU kernel's name): a call that leaves it out binds the GPU "
        "default on every device, so an NPU run raises ('GPU-only') or binds a CUDA kernel there, even though "
        "the config resolved the NPU one. The callee and its default are read from the tree (through the "
        "caller's import, also a function-local one), and a default counts as GPU-only when every registry row "
        "of the tree with that implementation name requires a GPU."
    )
    bad = (
        Example(
            """
            from ...registry import register_op
            from ...requirement import CudaKernelRequirement

            register_op("grouped_gemm", "standard", "cutlass", None, requirement=CudaKernelRequirement())
            register_op("grouped_gemm", "standard", "eager", None)

            _bound_kernel = None


            def bind_grouped_gemm(kernel: str = "cutlass") -> None:
                global _bound_kernel
                _bound_kernel = kernel


            def setup(ops_config):
                if ops_config.moe_implementation != "eager":
                    bind_grouped_gemm()
            """,
            path="veomni/ops/kernels/grouped_gemm/__init__.py",
            title="the binder's GPU default is used although the config resolved a kernel (callers in other "
            "modules are resolved through their import)",
        ),
    )
    good = (
        Example(
            """
            from ...registry import register_op
            from ...requirement import CudaKernelRequirement

            register_op("grouped_gemm", "standard", "cutlass", None, requirement=CudaKernelRequirement())
            register_op("grouped_gemm", "standard", "eager", None)

            _bound_kernel = None


            def bind_grouped_gemm(kernel: str = "cutlass") -> None:
                global _bound_kernel
                _bound_kernel = kernel


            def setup(ops_config):
                kernel = ops_config.moe_implementation
                if kernel != "eager":
                    bind_grouped_gemm(kernel=kernel)
            """,
            path="veomni/ops/kernels/grouped_gemm/__init__.py",
        ),
    )
    fix_safety = "No fix: which resolved kernel name the call should pass is decided by hand."
    requires = ("import",)
    node_types = (ast.Call,)

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        project = ctx.project
        rows: tuple[OpRow, ...] = (*project.registered, *project.slot_rows)
        if any(marker in ctx.source.text for marker in ("register_op", "register_kernel", "KernelSpec")):
            _ops, _slots, where, slot_where = read_registry_rows(ctx.tree)  # rows this module registers
            rows = (*rows, *(row for row, _line in where + slot_where))
        self.gpu_only = _gpu_only_names(rows)
        self.local: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {
            stmt.name: stmt
            for stmt in ctx.tree.body
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        if not self.gpu_only:
            self.node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Call)
        func = node.func
        if any(isinstance(a, ast.Starred) for a in node.args) or any(kw.arg is None for kw in node.keywords):
            return  # *args / **kwargs may carry it
        if isinstance(func, ast.Name):
            name = func.id
            if name not in self.local and not self.ctx.may_be_imported(name):
                return  # the cheap test first: a local, builtin or undefined name is no binder of the tree
        elif isinstance(func, ast.Attribute) and isinstance(func.value, (ast.Name, ast.Attribute)):
            name = func.attr  # `moe.bind_kernel()` through an imported module
            root = func.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if not isinstance(root, ast.Name) or not self.ctx.may_be_imported(root.id):
                return  # the cheap test first: only chains rooted at an imported name
            bound = self.ctx.local_qualname(root) or ""
            if not bound.startswith(("veomni", ".")):
                return  # rooted at torch, os, ...: not a binder of this tree
        else:
            return
        if isinstance(func, ast.Name) and name in self.local and name not in self.ctx.imports:
            origin = "this module"
            defaults: dict[str, str] | None = _str_defaults(self.local[name])
            params: tuple[str, ...] | None = _params(self.local[name])
        else:
            if isinstance(func, ast.Name):
                bound = self.ctx.imports.get(func.id)
                if bound is not None and not bound.startswith(("veomni", ".")):
                    return  # imported at module level from torch, os, ...: not a binder of this tree
            qualname = self.ctx.local_qualname(func)  # function-local imports included
            if qualname and qualname.startswith("."):
                key = ("npu218_relative", qualname)
                if key not in self.ctx.memo:
                    self.ctx.memo[key] = resolve_relative(self.ctx.source.path, qualname)
                qualname = self.ctx.memo[key]  # type: ignore[assignment]
            index = self.ctx.project.api.index
            if index is None or not qualname or not qualname.startswith("veomni."):
                return
            module, _, name = qualname.rpartition(".")
            found = index.string_defaults(module, name)
            if found is None:
                return
            origin, defaults, params = found
        if not defaults or not params:
            return
        passed = {kw.arg for kw in node.keywords}
        positional = [p for p in params if not p.startswith("*")][: len(node.args)]
        for param, default in defaults.items():
            rows = self.gpu_only.get(default)
            if rows is None or param in passed or param in positional:
                continue
            ops = ", ".join(sorted({f"{r.op}/{r.variant}" for r in rows}))
            devices = ", ".join(sorted({r.requirement for r in rows}))
            self.report(
                node,
                f'`{name}(...)` leaves out `{param}`, so it binds its default "{default}" ({origin}), an '
                f"implementation the tree registers for {devices} only ({ops}): on an Ascend host this call "
                f"binds the GPU kernel (or raises) whatever the ops config resolved; pass the resolved kernel",
            )
