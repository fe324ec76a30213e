"""NPU304 hub-kernel-decorator."""

from __future__ import annotations

import ast
from pathlib import Path

from npu_lint.core.astutil import call_name, str_value
from npu_lint.core.diagnostics import Applicability, Edit
from npu_lint.core.safeio import read_text
from npu_lint.rules.base import Context, Example, Rule, make_fix
from npu_lint.veomni.patchgen import load_file, package_specs
from npu_lint.veomni.upstream import (
    HUB_DECORATORS,
    file_source_module,
    hub_kernel_devices,
    upstream_class,
    upstream_path,
)


def _decorator_name(ctx: Context, deco: ast.expr) -> str | None:
    """``use_kernel_forward_from_hub`` of ``@use_kernel_forward_from_hub("X")`` (also a dotted or aliased
    import of it), else None."""
    if not isinstance(deco, ast.Call):
        return None
    qual = ctx.qualname(deco.func) if isinstance(deco.func, (ast.Name, ast.Attribute)) else None
    last = (qual or "").rsplit(".", 1)[-1]
    if last in HUB_DECORATORS:
        return last
    name = call_name(deco)
    return name if name in HUB_DECORATORS else None


def _hub_name(deco: ast.expr) -> tuple[str, str] | None:
    """(decorator, hub name) of a stdlib-ast hub decorator, read by its spelling alone (upstream modules)."""
    if not isinstance(deco, ast.Call):
        return None
    last = call_name(deco)
    if last not in HUB_DECORATORS:
        return None
    arg = deco.args[0] if deco.args else next((k.value for k in deco.keywords), None)
    value = str_value(arg)
    return (last, value) if value is not None else None


def _upstream_definition(
    module: str, node: ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
) -> ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The upstream class or module-level function of the same name, or None when upstream has none."""
    if isinstance(node, ast.ClassDef):
        found = upstream_class(module, node.name)
        return found[1] if found is not None else None
    path = upstream_path(module)
    parsed = load_file(str(path)) if path is not None else None
    tree = parsed.tree if parsed is not None else None
    if tree is None:
        return None
    return next(
        (
            s
            for s in tree.body
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == node.name
        ),
        None,
    )


def _spec_mentions(path: str, name: str) -> bool:
    """Whether an NPU spec of the generated file's model package names the hub kernel ``name`` (the spec is
    then where the decorator is reported)."""
    package = Path(path).resolve().parent.parent
    for spec in package_specs(package, "npu"):
        try:
            text = read_text(spec)
        except (OSError, ValueError):
            continue
        if f'"{name}"' in text or f"'{name}'" in text:
            return True
    return False


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
        "copies are left to their spec, except in an NPU-only generated module a decorator that neither the "
        "upstream definition nor the model's NPU spec carries (added by hand: an NPU run asks the hub for a "
        "kernel with no NPU build)."
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
        Example(
            """
            # AUTO-GENERATED FILE - DO NOT EDIT
            # Source: transformers.models.qwen3.modeling_qwen3
            from torch import nn
            from transformers.integrations.hub_kernels import use_kernel_forward_from_hub


            @use_kernel_forward_from_hub("MLP")
            class Qwen3MLP(nn.Module):
                def forward(self, x):
                    return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
            """,
            path="veomni/models/transformers/qwen3/generated/patched_modeling_qwen3_npu.py",
            title="an NPU-only generated module decorating a class that upstream does not (no fix in generated/)",
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
        Example(
            """
            # AUTO-GENERATED FILE - DO NOT EDIT
            # Source: transformers.models.qwen3.modeling_qwen3
            from torch import nn
            from transformers.integrations.hub_kernels import use_kernel_forward_from_hub


            @use_kernel_forward_from_hub("RMSNorm")
            class Qwen3RMSNorm(nn.Module):
                pass


            class Qwen3MLP(nn.Module):
                pass
            """,
            path="veomni/models/transformers/qwen3/generated/patched_modeling_qwen3_npu.py",
            title="an NPU generated module keeping upstream's RMSNorm hub decorator (mapped for npu)",
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
        if "_from_hub" not in ctx.source.text:
            return False
        path = ctx.source.path.replace("\\", "/")
        if ctx.source.kind.generated:
            return path.endswith("_npu.py")  # an NPU-only generated module: read for decorators added by hand
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
            if self.ctx.source.kind.generated:
                self._generated(node, deco, kind, name, devices)
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

    def _generated(
        self,
        node: ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef,
        deco: ast.expr,
        kind: str,
        name: str,
        devices: tuple[str, ...],
    ) -> None:
        """An NPU-only generated module: a decorator its upstream definition carries is the spec's business (it
        copies upstream), and one its spec writes is reported on the spec; one that neither carries was added
        to the generated file, where an NPU run looks for a hub kernel that has no NPU build."""
        src = self.ctx.source
        module = file_source_module(self.ctx.tree, src.text, src.path)
        if module is None:
            return
        upstream = _upstream_definition(module, node)
        if upstream is None or any(_hub_name(d) == (kind, name) for d in upstream.decorator_list):
            return
        if _spec_mentions(src.path, name):
            return
        self.report(
            deco,
            f'`@{kind}("{name}")` on `{node.name}` in an NPU-only generated module: the installed transformers '
            f"maps the `{name}` hub kernel for {', '.join(devices)} and not for npu, and neither upstream "
            f"`{module}` nor the model's NPU spec decorates `{node.name}`: kernelizing the model on Ascend "
            "looks for a kernel that has no NPU build; drop the decorator (and regenerate from the spec)",
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
