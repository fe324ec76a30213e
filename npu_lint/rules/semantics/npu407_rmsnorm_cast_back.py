"""NPU407 rmsnorm-cast-back."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.semantics._rms_math import fixed_casts, fp32_returns, has_downcast, rms_sites


class RmsNormCastBack(Rule):
    code = "NPU407"
    name = "rmsnorm-cast-back"
    summary = (
        "An RMSNorm forward (a spec's, a generated copy's, an in-tree class's, a kernel's eager fallback) upcasts "
        "to fp32 and returns the fp32 result without casting it back to the input dtype."
    )
    why = (
        "RMSNorm computes in fp32 and hands the next layer a tensor of the input dtype (`.to(input_dtype)`, "
        "`.type_as(x)`). A forward that upcasts and returns the fp32 product feeds fp32 activations to a bf16 "
        "projection: a dtype error in the next matmul, or the residual stream silently promoted to fp32, and on NPU "
        "(where the eager branch runs whenever no fused kernel is bound) the numerics and memory diverge from the "
        "fused path. Every function the tree runs as an RMSNorm is read: a spec's or generated file's replacement "
        "of an RMSNorm class's method (reported only where the upstream method casts back), the methods of an "
        "RMSNorm class the tree defines itself, and a module-level function computing the mean of squares (a "
        "kernel module's eager fallback). The value is followed through locals and the module's own helpers "
        "(`self._norm(x.float())`); a return of a kernel call is not judged."
        " A cast back to a fixed dtype (`.to(torch.bfloat16)`, `.half()`) of the fp32 result, where the upstream "
        "method casts to the input's dtype, is reported too. A fused kernel returns its input's dtype: a kernel "
        "call given the upcast tensor (`fused(x.float(), w, eps)`) returns fp32 as well. A spec's own RMSNorm "
        "helper (a module-level `def _rms_norm_eager(x, w, eps)`) is read like a forward."
    )
    bad = (
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.gemma3.modeling_gemma3", target_file="x.py")


            @config.override_method("Gemma3RMSNorm.forward")
            def gemma3_norm_forward_patched(self, hidden):
                normed = self._norm(hidden.float())
                scaled = normed * (1.0 + self.weight.float())
                return scaled
            """,
            path="veomni/models/transformers/gemma3/gemma3_gpu_patch_gen_config.py",
        ),
        Example(
            """
            import torch


            class MixerRMSNorm(torch.nn.Module):
                def __init__(self, dim, eps=1e-6):
                    super().__init__()
                    self.eps = eps
                    self.weight = torch.nn.Parameter(torch.ones(dim))

                def forward(self, x):
                    h = x.to(torch.float32)
                    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
                    return self.weight * h
            """,
            path="veomni/models/transformers/mixer/modeling_mixer.py",
            title="an RMSNorm class the tree defines itself",
        ),
        Example(
            """
            def plain_norm_fallback(x, weight, eps):
                x32 = x.float()
                inv = (x32.square().mean(-1, keepdim=True) + eps).rsqrt()
                return x32 * inv * weight
            """,
            path="veomni/ops/kernels/rms_norm/npu.py",
            title="a kernel module's eager fallback",
        ),
        Example(
            """
            import torch
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3.modeling_qwen3", target_file="x.py")


            @config.override_method("Qwen3RMSNorm.forward")
            def qwen3_norm_forward_patched(self, hidden_states):
                hidden_states = hidden_states.to(torch.float32)
                variance = hidden_states.pow(2).mean(-1, keepdim=True)
                hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
                return self.weight * hidden_states.to(torch.bfloat16)
            """,
            path="veomni/models/transformers/qwen3/qwen3_gpu_patch_gen_config.py",
            title="the cast back to a fixed dtype",
        ),
    )
    good = (
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.gemma3.modeling_gemma3", target_file="x.py")


            @config.override_method("Gemma3RMSNorm.forward")
            def gemma3_norm_forward_patched(self, hidden):
                normed = self._norm(hidden.float())
                scaled = normed * (1.0 + self.weight.float())
                return scaled.type_as(hidden)
            """,
            path="veomni/models/transformers/gemma3/gemma3_gpu_patch_gen_config.py",
        ),
        Example(
            """
            def plain_norm_fallback(x, weight, eps):
                inv = (x.float().square().mean(-1, keepdim=True) + eps).rsqrt()
                return x * inv.to(x.dtype) * weight
            """,
            path="veomni/ops/kernels/rms_norm/npu.py",
        ),
    )
    fix_safety = (
        "No fix: the cast back belongs where the upstream forward puts it (before or after the weight)."
    )

    requires = (("float", "float32"), ("rsqrt", "sqrt", "_norm"))
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:  # model code and the tree's kernels (veomni/ops)
        return not ctx.source.kind.test

    def finish(self) -> None:
        for site in rms_sites(self.ctx):
            if site.cls is not None and (site.method or site.func.name).startswith("_"):
                continue  # a class's helper (`_norm`) may return fp32 by design: its forward casts back
            fixed = fixed_casts(site.func)
            if fixed and not (site.upstream is not None and fixed_casts(site.upstream)):
                self.report(
                    fixed[0],
                    f"{site.label} casts its fp32 result back to a fixed dtype (`{ast.unparse(fixed[0])}`) instead "
                    "of the input's (`.to(input_dtype)`, `.type_as(x)`): fp32 and fp16 runs get bf16 activations "
                    "(or the reverse)",
                )
                continue
            returns = fp32_returns(site.func)
            if not returns:
                continue
            if site.upstream is not None and (fp32_returns(site.upstream) or not has_downcast(site.upstream)):
                continue  # upstream returns fp32 too: deliberate
            where = site.label
            node: ast.AST = returns[-1]
            self.report(
                node,
                f"{where} upcasts to fp32 and returns the fp32 result without casting it back to the input dtype"
                + (
                    " (the upstream forward casts back): "
                    if site.upstream is not None
                    else " (`.to(input_dtype)`, `.type_as(x)`): "
                )
                + "the next bf16/fp16 layer gets fp32 activations",
            )
