"""NPU404 offset-on-standard-rmsnorm."""

from __future__ import annotations

import ast
import functools
import os

from npu_lint.core.diagnostics import Applicability
from npu_lint.rules.base import Context, Example, make_fix
from npu_lint.rules.semantics._shared import (
    _assigned_in,
    _RmsNormCalls,
    eager_weight_products,
    norm_code,
    offset_inner,
    offset_raw,
    raw_weight_attr,
    receiver_of,
    weight_argument,
    weight_products,
)


@functools.lru_cache(maxsize=256)
def _raw_attr(raw: str, receiver: str = "self") -> str | None:
    """The weight attribute a raw text expression reads (remembered by its text: one parse per text)."""
    try:
        return raw_weight_attr(ast.parse(raw.strip(), mode="eval").body, receiver)
    except SyntaxError:
        return None


class OffsetOnStandardRmsNorm(_RmsNormCalls):
    code = "NPU404"
    name = "offset-on-standard-rmsnorm"
    summary = (
        "`1 + weight` is passed to a standard RMSNorm kernel in a model whose RMSNorm weight starts at ones, or an "
        "offset (`1 + weight`) RMSNorm's weight is initialised to ones (its `__init__`, or the model's "
        "`_init_weights`)."
    )
    why = (
        "Only Gemma-style RMSNorms (weight initialised to zeros) compute `norm(x) * (1 + weight)`. A model whose "
        "RMSNorm initialises its weight to ones (Llama, Qwen3, Qwen3-VL text) computes `norm(x) * weight`; "
        "passing `1 + weight` (or `1.0 + w.float()`, a variable holding it) to a standard handle, an OpSlot or a "
        "vendor kernel such as `torch_npu.npu_rms_norm` doubles every activation scale. It happens when a "
        "Gemma 3 migration is used as the template for another model. The initialiser is read from the class "
        "(file, spec `__init__` patch, or the upstream transformers class)."
        " The eager math of the file's RMSNorm classes is read too (an in-tree model such as a diffusion transformer, a spec's replacement of an upstream norm's forward, a generated copy): `x * (1 + self.weight)` or `self.weight.add(1) * x` on a ones-initialised weight is reported. A kernel wrapper of an in-tree norm may name the module otherwise than `self` (its first parameter)."
        " A forward another model's spec defines and this spec registers for a ones-initialised norm (`override_method(..., replacement=imported)`) is reported when its eager math multiplies by `1 + weight`; so is a kernel function of the tree that uses its weight raw (read from its source) given `1 + weight`."
        " The reverse holds for the initialisation: an offset norm (its forward multiplies by `1 + weight`, or the "
        "upstream class of a generated copy starts at zeros) whose weight a class `__init__` or the model's "
        "`_init_weights` (`init.ones_(module.weight)` under `isinstance(module, XRMSNorm)`) sets to ones scales "
        "every normalised activation by 2 in a fresh or partly loaded model (`norms.weight_init_faults`)."
        " The tree's kernel modules that mention `rms_norm` (in-tree wrappers, `veomni/ops/kernels/...`) are read as model code is."
    )
    bad = (
        Example(
            """
            import torch
            import torch_npu
            from torch import nn


            class ToyRMSNorm(nn.Module):
                def __init__(self, dim, eps=1e-6):
                    super().__init__()
                    self.variance_epsilon = eps
                    self.weight = nn.Parameter(torch.ones(dim))

                def forward(self, x):
                    return torch_npu.npu_rms_norm(x, 1.0 + self.weight, epsilon=self.variance_epsilon)[0]
            """,
            fixed="""
            import torch
            import torch_npu
            from torch import nn


            class ToyRMSNorm(nn.Module):
                def __init__(self, dim, eps=1e-6):
                    super().__init__()
                    self.variance_epsilon = eps
                    self.weight = nn.Parameter(torch.ones(dim))

                def forward(self, x):
                    return torch_npu.npu_rms_norm(x, self.weight, epsilon=self.variance_epsilon)[0]
            """,
            title="a vendor kernel call",
        ),
        Example(
            """
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.llama.modeling_llama", target_file="x.py")


            @config.override_method("LlamaRMSNorm.forward")
            def llama_rmsnorm_forward_patched(self, hidden_states):
                op = VeomniOp("rms_norm", "standard", resolve_op_impl("rms_norm_implementation"))
                return op(hidden_states, 1.0 + self.weight.float(), eps=self.variance_epsilon)
            """,
            fixed="""
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.llama.modeling_llama", target_file="x.py")


            @config.override_method("LlamaRMSNorm.forward")
            def llama_rmsnorm_forward_patched(self, hidden_states):
                op = VeomniOp("rms_norm", "standard", resolve_op_impl("rms_norm_implementation"))
                return op(hidden_states, self.weight.float(), eps=self.variance_epsilon)
            """,
            path="veomni/models/transformers/llama/llama_gpu_patch_gen_config.py",
            title="upstream LlamaRMSNorm initialises to ones",
        ),
        Example(
            """
            import torch
            from torch import nn


            class RMSNorm(nn.Module):
                def __init__(self, dim, eps=1e-5):
                    super().__init__()
                    self.eps = eps
                    self.weight = nn.Parameter(torch.ones(dim))

                def norm(self, x):
                    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)

                def forward(self, x):
                    dtype = x.dtype
                    return self.norm(x.float()).to(dtype) * (1 + self.weight)
            """,
            path="veomni/models/transformers/wan/modeling_wan.py",
            title="the eager math of a ones-initialised in-tree RMSNorm adds the offset",
        ),
        Example(
            """
            import torch
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.mistral.modeling_mistral", target_file="x.py")


            @config.override_method("MistralRMSNorm.forward")
            def mistral_rmsnorm_forward_patched(self, hidden_states):
                input_dtype = hidden_states.dtype
                hidden_states = hidden_states.to(torch.float32)
                variance = hidden_states.pow(2).mean(-1, keepdim=True)
                hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
                return self.weight.add(1) * hidden_states.to(input_dtype)
            """,
            path="veomni/models/transformers/mistral/mistral_gpu_patch_gen_config.py",
            title="a spec's replacement forward of an upstream ones-initialised norm adds the offset in its eager math",
        ),
        Example(
            """
            import torch
            import torch.nn as nn


            class ToyGemmaRMSNorm(nn.Module):
                def __init__(self, dim, eps=1e-6):
                    super().__init__()
                    self.eps = eps
                    self.weight = nn.Parameter(torch.zeros(dim))

                def forward(self, x):
                    out = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
                    return (out * (1.0 + self.weight.float())).type_as(x)


            class ToyPreTrainedModel(nn.Module):
                def _init_weights(self, module):
                    if isinstance(module, ToyGemmaRMSNorm):
                        nn.init.ones_(module.weight)
            """,
            path="veomni/models/transformers/toy/generated/patched_modeling_toy_npu.py",
            title="an offset norm's weight filled with ones by `_init_weights`",
        ),
    )
    good = (
        Example(
            """
            import torch
            from torch import nn
            from veomni.ops.dispatch import OpSlot

            veomni_rms_norm = OpSlot("rms_norm", "standard")


            class ToyGemmaRMSNorm(nn.Module):
                def __init__(self, dim, eps=1e-6):
                    super().__init__()
                    self.eps = eps
                    self.weight = nn.Parameter(torch.zeros(dim))

                def forward(self, x):
                    return veomni_rms_norm(x, 1.0 + self.weight, self.eps)
            """
        ),
    )
    fix_safety = (
        "Unsafe (changes the numerics, to the intended ones): the argument becomes the raw weight. Unsafe "
        "because a checkpoint trained with the wrong scale would change behaviour."
    )

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return norm_code(ctx)

    def finish(self) -> None:
        ctx = self.ctx
        self.report_init_faults("ones")
        if "RMSNorm" in ctx.source.text or "RmsNorm" in ctx.source.text:
            for cls, node, attr, offset in eager_weight_products(ctx.tree):
                if offset and self.weight_kind(cls, attr) == "ones":
                    self.report(
                        node,
                        f"`{cls}` initialises `{attr}` to ones (a standard RMSNorm), but its eager path multiplies by "
                        f"`{ctx.source.segment(node)}`: the offset does not belong to this model",
                    )
        for name_node, cls, func, path in self.reused_functions():
            for side, attr, offset in weight_products(func):
                if offset and self.weight_kind(cls, attr) == "ones":
                    self.report(
                        name_node,
                        f"`{name_node.id}` (from {os.path.basename(path)}) multiplies by `{ast.unparse(side)}`, but "
                        f"`{cls}`, which it is registered for here, initialises `{attr}` to ones (a standard "
                        "RMSNorm): the offset does not belong to this model",
                    )
                    break
        targets: list[tuple[ast.Call, ast.AST | None, str | None, str]] = []
        for call, func, cls, handle in self.rms_calls():
            if self.contract_of(handle) == "standard":
                targets.append(
                    (call, func, cls, f"a standard RMSNorm handle (variant `{handle.raw_variant}`)")
                )
        for call, func, cls, qual in self.vendor_rms_calls():
            if self.kernel_contract(qual, call) != "standard":
                continue
            targets.append((call, func, cls, f"`{qual}` (a standard RMSNorm kernel)"))
        for call, _func, cls, handle, anchor in self.reused_rms_calls():
            arg = weight_argument(call)
            inner = offset_inner(arg) if arg is not None else None
            attr = raw_weight_attr(inner) if inner is not None else None
            if (
                self.contract_of(handle) != "standard"
                or attr is None
                or self.weight_kind(cls, attr) != "ones"
            ):
                continue
            self.report(
                anchor,
                f"`{anchor.id}` (reused for `{cls}`) passes `{ast.unparse(arg)}` to this spec's standard RMSNorm "
                f"handle, but `{cls}` initialises `{attr}` to ones: the offset does not belong to this model",
            )
        for call, func, cls, what in targets:
            arg = weight_argument(call)
            if arg is None:
                continue
            raw = offset_raw(ctx, arg)
            shown = ctx.source.segment(arg)
            if raw is None and isinstance(arg, ast.Name):
                values = _assigned_in(func, arg.id)
                raws = [offset_raw(ctx, v) for v in values]
                if not values or any(r is None for r in raws) or len(set(raws)) != 1:
                    continue
                raw = raws[0]
                shown = f"{arg.id} = {ctx.source.segment(values[0])}"
            if raw is None:
                continue
            attr = _raw_attr(raw, receiver_of(func))
            if attr is None or self.weight_kind(cls, attr) != "ones":
                continue
            fix = make_fix(
                f"Pass the raw weight `{raw}`",
                [ctx.replace(arg, raw)],
                Applicability.UNSAFE,
                "changes the scale to norm(x) * weight, as the ones-initialised weight intends",
            )
            self.report(
                arg,
                f"`{shown}` passed to {what}, but `{cls}` initialises `{attr}` to ones (a standard RMSNorm): "
                "the offset does not belong to this model; pass the raw weight",
                fix,
            )
