"""NPU304 hub-kernel-decorator."""

from __future__ import annotations

import ast
from pathlib import Path

from npu_lint.core.astutil import str_value
from npu_lint.core.diagnostics import Applicability, Edit
from npu_lint.rules.base import Context, Example, Rule, make_fix
from npu_lint.veomni.upstream import HUB_DECORATORS, hub_kernel_devices


def _decorator_name(ctx: Context, deco: ast.expr) -> str | None:
    """``use_kernel_forward_from_hub`` of ``@use_kernel_forward_from_hub("X")`` (also a dotted or aliased
    import of it), else None."""
    if not isinstance(deco, ast.Call):
        return None
    qual = ctx.qualname(deco.func) if isinstance(deco.func, (ast.Name, ast.Attribute)) else None
    last = (qual or "").rsplit(".", 1)[-1]
    if last in HUB_DECORATORS:
        return last
    func = deco.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name if name in HUB_DECORATORS else None


class HubKernelDecorator(Rule):
    code = "NPU304"
    name = "hub-kernel-decorator"
    summary = (
        "VeOmni model code decorates a class or function with a kernels-hub decorator whose hub kernel has no "
        "NPU build."
    )
    why = (
        "`@use_kernel_forward_from_hub(name)` / `@use_kernel_func_from_hub(name)` (transformers' "
        "`integrations.hub_kernels`) let the `kernels` package replace the decorated forward or function with "
        "a kernel downloaded from the Hub, chosen per device from transformers' `_KERNEL_MAPPING`. For a name "
        "mapped only to CUDA-family devices (MegaBlocks' MoE MLP, the activation and rotary kernels), a GPU "
        "run can execute the hub kernel while an NPU run keeps the Python code: the two devices no longer run "
        "the same model, and the hub kernel bypasses the op handles VeOmni dispatches through. VeOmni's "
        "maintainers drop such decorators in their specs when they patch the class. The devices are read from "
        "the installed transformers (never imported); a name it maps for `npu` is left alone, and generated "
        "copies are left to their spec."
    )
    bad = (
        Example(
            """
            from torch import nn
            from transformers.integrations.hub_kernels import use_kernel_forward_from_hub


            @config.replace_class("ToyMoeBlock", description="route through the patched experts")
            @use_kernel_forward_from_hub("MegaBlocksMoeMLP")
            class PatchedToyMoeBlock(nn.Module):
                def forward(self, hidden_states):
                    return self.experts(hidden_states)
            """,
            fixed="""
            from torch import nn


            @config.replace_class("ToyMoeBlock", description="route through the patched experts")
            class PatchedToyMoeBlock(nn.Module):
                def forward(self, hidden_states):
                    return self.experts(hidden_states)
            """,
            path="veomni/models/transformers/toy/toy_gpu_patch_gen_config.py",
            title="a patched class that keeps the upstream MegaBlocks hub decorator",
        ),
        Example(
            """
            import torch
            from transformers.integrations import hub_kernels


            @config.replace_function("toy_activation")
            @hub_kernels.use_kernel_forward_from_hub("FastGELU")
            def toy_activation_patched(x):
                return 0.5 * x * (1.0 + torch.tanh(0.7978845608 * (x + 0.044715 * x**3)))
            """,
            fixed="""
            import torch


            @config.replace_function("toy_activation")
            def toy_activation_patched(x):
                return 0.5 * x * (1.0 + torch.tanh(0.7978845608 * (x + 0.044715 * x**3)))
            """,
            path="veomni/models/transformers/toy/toy_npu_patch_gen_config.py",
            title="through the module",
        ),
    )
    good = (
        Example(
            """
            from torch import nn
            from transformers.integrations.hub_kernels import use_kernel_forward_from_hub


            @config.replace_class("ToyRMSNorm")
            @use_kernel_forward_from_hub("RMSNorm")  # transformers maps an npu kernel for it
            class PatchedToyRMSNorm(nn.Module):
                def forward(self, x):
                    return self.veomni_rms_norm(x, self.weight, self.variance_epsilon)
            """,
            path="veomni/models/transformers/toy/toy_gpu_patch_gen_config.py",
        ),
        Example(
            """
            from torch import nn
            from transformers.integrations.hub_kernels import use_kernel_forward_from_hub


            @use_kernel_forward_from_hub("MegaBlocksMoeMLP")
            class ToyMoeBlock(nn.Module):
                pass
            """,
            path="veomni/models/transformers/toy/generated/patched_modeling_toy_gpu.py",
            title="a generated copy: its spec is where the decorator is dropped",
        ),
    )
    fix_safety = (
        "Unsafe: deleting the decorator line changes what a GPU run with hub kernels enabled executes (the "
        "model's own forward instead of the hub kernel); it never changes the NPU run. Only a decorator on "
        "lines of its own is removed."
    )
    node_types = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        if "_from_hub" not in ctx.source.text or ctx.source.kind.generated:
            return False
        path = ctx.source.path.replace("\\", "/")
        if path.endswith("_patch_gen_config.py"):
            return True
        if ctx.project.root is None or not ctx.project.model_packages:
            return False
        try:
            resolved = Path(ctx.source.path).resolve()
        except (OSError, RuntimeError):
            return False
        return any(resolved.is_relative_to(package) for package in ctx.project.model_packages)

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        for deco in node.decorator_list:
            kind = _decorator_name(self.ctx, deco)
            if kind is None or not isinstance(deco, ast.Call):
                continue
            arg = deco.args[0] if deco.args else next((k.value for k in deco.keywords), None)
            name = str_value(arg)
            if name is None:
                continue
            devices = hub_kernel_devices(name)
            if not devices or "npu" in devices:
                continue
            what = "forward of" if kind == "use_kernel_forward_from_hub" else "function"
            self.report(
                deco,
                f'`@{kind}("{name}")` lets the kernels hub replace the {what} `{node.name}` with its `{name}` '
                f"kernel, which the installed transformers maps for {', '.join(devices)} and not for npu: a GPU "
                "run can execute a hub kernel outside VeOmni's dispatch while an NPU run keeps this code; drop "
                "the decorator",
                self._fix(deco),
            )

    def _fix(self, deco: ast.expr):  # noqa: ANN202
        src = self.ctx.source
        first, last = deco.lineno, deco.end_lineno or deco.lineno
        head = src.line_text(first)
        tail = src.line_text(last)
        at = src.char_col(first, deco.col_offset)
        if head[:at].strip() != "@" or tail[src.char_col(last, deco.end_col_offset or 0) :].strip():
            return None  # not on lines of its own
        start = src.line_offset(first)
        end = src.line_offset(last + 1) if last < len(src.lines) else len(src.text)
        return make_fix(
            "Drop the hub decorator",
            [Edit(start, end, "")],
            Applicability.UNSAFE,
            "changes GPU runs with hub kernels enabled",
        )
