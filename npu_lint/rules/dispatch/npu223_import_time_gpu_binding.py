"""NPU223 import-time-gpu-binding."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import call_name, keyword_arg, str_value
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.catalog import ANY, MLU, NPU
from npu_lint.veomni.resolution import file_bindings, module_of

_RESOLVERS = ("resolve", "get_kernel", "lookup")


def _module_level_calls(body: list[ast.stmt]) -> list[ast.Call]:
    """Calls a module makes when it loads: its top-level statements and the branches of top-level ``if``s."""
    out: list[ast.Call] = []
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if isinstance(stmt, ast.If):
            out.extend(_module_level_calls(stmt.body))
            out.extend(_module_level_calls(stmt.orelse))
            continue
        if isinstance(stmt, ast.Try):
            out.extend(_module_level_calls(stmt.body))
            continue
        out.extend(n for n in ast.walk(stmt) if isinstance(n, ast.Call))
    return out


class ImportTimeGpuBinding(Rule):
    code = "NPU223"
    name = "import-time-gpu-binding"
    summary = (
        "A module resolves (or binds) a literal implementation name when it loads, and every row the tree "
        "registers under that name is GPU-only: importing the module on Ascend resolves a GPU kernel before the "
        "ops config is applied."
    )
    why = (
        "The tree's binders resolve each op from the ops config once it is known (`apply_ops_config`, "
        "`OpSlot.bind`, per-model patches), so that an Ascend host gets the NPU value of every field. A "
        "`KERNEL_REGISTRY.resolve(op, variant, 'triton')` or `slot.bind('triton')` run at module level bypasses "
        "that: it happens on every host that imports the module, before any configuration, and when the name's "
        "rows are all GPU-only the registry raises its hardware error (or imports the GPU kernel) on Ascend. A "
        "package-availability test around it does not help: Ascend images carry `triton` (triton-ascend) too. "
        "The rule reads the rows of the name from the tree's registry and the module itself."
    )
    bad = (
        Example(
            """
            from ...kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec
            from ....utils.import_utils import is_package_available


            def _fused_factory():
                from .fused_cuda import fused_aux

                return fused_aux


            KERNEL_REGISTRY.register(KernelSpec(name="fused", op_name="aux_loss", variant="standard",
                                                factory=_fused_factory, hardware=HardwareRequirement(device_type="gpu")))

            _aux_loss = None
            if is_package_available("triton"):
                _aux_loss = KERNEL_REGISTRY.resolve("aux_loss", "standard", "fused")
            """,
            path="veomni/ops/kernels/aux_loss/__init__.py",
            title="a GPU-only row resolved when the package loads",
        ),
    )
    good = (
        Example(
            """
            from ...kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec


            def _fused_factory():
                from .fused_cuda import fused_aux

                return fused_aux


            KERNEL_REGISTRY.register(KernelSpec(name="fused", op_name="aux_loss", variant="standard",
                                                factory=_fused_factory, hardware=HardwareRequirement(device_type="gpu")))

            _aux_loss = KERNEL_REGISTRY.resolve("aux_loss", "standard", "eager")


            def bind_aux_loss(ops_config):
                global _aux_loss
                _aux_loss = KERNEL_REGISTRY.resolve("aux_loss", "standard", ops_config.aux_loss_implementation)
            """,
            path="veomni/ops/kernels/aux_loss/__init__.py",
        ),
    )
    fix_safety = "No fix: the binding belongs in the config-time binder, which is decided by hand."
    requires = (("resolve(", "bind(", "get_kernel(", "lookup("),)
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def finish(self) -> None:
        calls = []
        for call in _module_level_calls(self.ctx.tree.body):
            name = call_name(call)
            if name not in _RESOLVERS or len(call.args) < 3:
                continue
            op, variant = str_value(call.args[0]), str_value(call.args[1])
            impl = str_value(call.args[2]) or str_value(keyword_arg(call, "impl_name"))
            if None in (op, variant, impl) or impl == "eager":
                continue
            calls.append((call, op, variant, impl))
        if not calls:
            return
        module, is_package = module_of(self.ctx.source.path)
        local = [
            (b.op, b.variant, b.impl, b.device) for b in file_bindings(self.ctx.tree, module, is_package)
        ]
        project = self.ctx.project
        rows = local + [
            (r.op, r.variant, r.impl, r.requirement) for r in (*project.registered, *project.slot_rows)
        ]
        for call, op, variant, impl in calls:
            devices = {d for o, v, i, d in rows if (o, v, i) == (op, variant, impl)}
            if not devices or devices & {NPU, ANY, MLU}:
                continue
            self.report(
                call,
                f"`{op}/{variant}` is resolved to `{impl}` when this module loads, and every row of `{impl}` is "
                "GPU-only: on Ascend the import resolves a GPU kernel (the registry's hardware error, or a CUDA "
                "import) before the ops config is applied; bind it in the config-time binder from the "
                "configured implementation name",
            )
