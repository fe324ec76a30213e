"""NPU401 offset-rmsnorm-double-application."""

from __future__ import annotations

import ast

from npu_lint.core.diagnostics import Applicability
from npu_lint.rules.base import Context, Example, make_fix
from npu_lint.rules.semantics._shared import (
    _assigned_in,
    _RmsNormCalls,
    norm_code,
    offset_inner,
    offset_raw,
    weight_argument,
)


class OffsetRmsNormDoubleApplication(_RmsNormCalls):
    code = "NPU401"
    name = "offset-rmsnorm-double-application"
    summary = (
        "`1 + weight` is passed to an offset RMSNorm handle (`qwen3_5`, `offset`), which adds the 1 itself."
    )
    why = (
        "Gemma-style RMSNorm (Gemma 3, Qwen3.5, Qwen3-Next) computes `norm(x) * (1 + weight)` with a weight "
        "initialised to zeros. The offset variant of `rms_norm` (named `qwen3_5` in VeOmni's trees, OpSlot and VeomniOp "
        "alike, and `offset` in some catalogs; `veomni/norms.py` maps names to contracts) adds the 1 "
        "inside the kernel, so the caller passes the raw weight. Passing `1 + w` (or `1.0 + w.float()`, "
        "`w + 1`, `(1 + w).to(dtype)`, or a variable holding one of those) applies the offset twice: training "
        "runs, the loss is just wrong. This happens when OpSlot-era Gemma 3 code, which passed `1.0 + w` to a "
        "`standard` slot, is moved to the `offset` variant without dropping the 1."
        " A kernel function of the tree that adds 1 to the weight it is given (read from its source) is an offset kernel too."
        " The tree's kernel modules that mention `rms_norm` (in-tree wrappers, `veomni/ops/kernels/...`) are read as model code is."
    )
    bad = (
        Example(
            """
            import torch
            from torch import nn
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl


            class ToyGemmaRMSNorm(nn.Module):
                def __init__(self, dim, eps=1e-6):
                    super().__init__()
                    self.eps = eps
                    self.weight = nn.Parameter(torch.zeros(dim))
                    self.veomni_rms_norm = VeomniOp("rms_norm", "offset", resolve_op_impl("rms_norm_implementation"))

                def forward(self, x):
                    return self.veomni_rms_norm(x, 1.0 + self.weight.float(), eps=self.eps)
            """,
            fixed="""
            import torch
            from torch import nn
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl


            class ToyGemmaRMSNorm(nn.Module):
                def __init__(self, dim, eps=1e-6):
                    super().__init__()
                    self.eps = eps
                    self.weight = nn.Parameter(torch.zeros(dim))
                    self.veomni_rms_norm = VeomniOp("rms_norm", "offset", resolve_op_impl("rms_norm_implementation"))

                def forward(self, x):
                    return self.veomni_rms_norm(x, self.weight.float(), eps=self.eps)
            """,
            title="the offset written at the call",
        ),
        Example(
            """
            import torch
            from torch import nn
            from veomni.ops import VeomniOp


            class ToyQwen35RMSNorm(nn.Module):
                def __init__(self, dim, impl, eps=1e-6):
                    super().__init__()
                    self.eps = eps
                    self.weight = nn.Parameter(torch.zeros(dim))
                    self.veomni_rms_norm = VeomniOp("rms_norm", "qwen3_5", impl)

                def forward(self, x):
                    return self.veomni_rms_norm(x, self.weight + 1, eps=self.eps)
            """,
            fixed="""
            import torch
            from torch import nn
            from veomni.ops import VeomniOp


            class ToyQwen35RMSNorm(nn.Module):
                def __init__(self, dim, impl, eps=1e-6):
                    super().__init__()
                    self.eps = eps
                    self.weight = nn.Parameter(torch.zeros(dim))
                    self.veomni_rms_norm = VeomniOp("rms_norm", "qwen3_5", impl)

                def forward(self, x):
                    return self.veomni_rms_norm(x, self.weight, eps=self.eps)
            """,
            title="the offset variant under the name VeOmni's trees give it (`qwen3_5`)",
        ),
        Example(
            '''
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_5.modeling_qwen3_5", target_file="x.py")
            config.add_post_import_block(
                """
                from veomni.ops.dispatch import OpSlot
                veomni_rms_norm = OpSlot("rms_norm", "qwen3_5")
                """
            )


            @config.override_method("Qwen3_5RMSNorm.forward")
            def qwen3_5_rmsnorm_forward_patched(self, x):
                scale = (1 + self.weight).to(x.dtype)
                if veomni_rms_norm.use_non_eager_impl:
                    return veomni_rms_norm(x, scale, self.eps)
                return self._norm(x.float()).type_as(x) * scale
            ''',
            fixed='''
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_5.modeling_qwen3_5", target_file="x.py")
            config.add_post_import_block(
                """
                from veomni.ops.dispatch import OpSlot
                veomni_rms_norm = OpSlot("rms_norm", "qwen3_5")
                """
            )


            @config.override_method("Qwen3_5RMSNorm.forward")
            def qwen3_5_rmsnorm_forward_patched(self, x):
                scale = (1 + self.weight).to(x.dtype)
                if veomni_rms_norm.use_non_eager_impl:
                    return veomni_rms_norm(x, self.weight.to(x.dtype), self.eps)
                return self._norm(x.float()).type_as(x) * scale
            ''',
            path="veomni/models/transformers/qwen3_5/qwen3_5_gpu_patch_gen_config.py",
            title="a variable holding 1 + w, passed to an OpSlot qwen3_5 slot declared in a post-import block",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.gemma2.modeling_gemma2", target_file="x.py")


            @config.override_method("Gemma2RMSNorm.forward")
            def gemma2_norm_forward_npu(self, hidden):
                from veomni.ops.kernels.rms_norm.npu import gemma_rms_norm_npu

                return gemma_rms_norm_npu(hidden, 1.0 + self.weight.float(), self.eps)
            """,
            fixed="""
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.gemma2.modeling_gemma2", target_file="x.py")


            @config.override_method("Gemma2RMSNorm.forward")
            def gemma2_norm_forward_npu(self, hidden):
                from veomni.ops.kernels.rms_norm.npu import gemma_rms_norm_npu

                return gemma_rms_norm_npu(hidden, self.weight.float(), self.eps)
            """,
            path="veomni/models/transformers/gemma2/gemma2_npu_patch_gen_config.py",
            title="`1 + w` given to a kernel function of the tree that adds the 1 itself",
        ),
    )
    good = (
        Example(
            """
            from veomni.ops.dispatch import OpSlot

            veomni_rms_norm = OpSlot("rms_norm", "standard")


            class ToyGemmaRMSNorm:
                def forward(self, x):
                    # OpSlot-era Gemma 3: 1 + w passed to a *standard* slot is correct
                    return veomni_rms_norm(x, 1.0 + self.weight, self.eps)
            """
        ),
        Example(
            """
            class ToyGemmaRMSNorm:
                def forward(self, x):
                    return self.veomni_rms_norm(x, self.weight, eps=self.eps)

                def __init__(self, impl):
                    self.veomni_rms_norm = VeomniOp("rms_norm", "offset", impl)
            """
        ),
    )
    fix_safety = (
        "Safe: the argument becomes the raw weight (`1.0 + self.weight.float()` -> `self.weight.float()`, "
        "`(1 + w).to(d)` -> `w.to(d)`; a variable is replaced at the call by the raw expression it was built "
        "from), which is what the `offset` kernel expects. The variable itself is left for other uses."
    )

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return norm_code(ctx)

    def finish(self) -> None:
        ctx = self.ctx
        for call, func, _cls, handle in self.rms_calls():
            if self.contract_of(handle) != "offset":
                continue
            arg = weight_argument(call)
            assert arg is not None
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
            fix = make_fix(f"Pass the raw weight `{raw}`", [ctx.replace(arg, raw)], Applicability.SAFE)
            variant = handle.raw_variant or handle.variant
            self.report(
                arg,
                f"`{shown}` passed to an offset RMSNorm handle (variant `{variant}`), which adds the 1 itself: "
                "the offset is applied twice; pass the raw weight",
                fix,
            )
        for call, func, _cls, qual in self.vendor_rms_calls():
            if self.kernel_contract(qual, call) != "offset":
                continue
            arg = weight_argument(call)
            if arg is None:
                continue
            raw = offset_raw(ctx, arg)
            shown = ctx.source.segment(arg)
            if raw is None and isinstance(arg, ast.Name):  # a local holding `1 + w`
                values = _assigned_in(func, arg.id)
                raws = [offset_raw(ctx, v) for v in values]
                if not values or any(r is None for r in raws) or len(set(raws)) != 1:
                    continue
                raw = raws[0]
                shown = f"{arg.id} = {ctx.source.segment(values[0])}"
            if raw is None:
                continue
            self.report(
                arg,
                f"`{shown}` passed to `{qual}`, an offset RMSNorm kernel that adds the 1 itself: the offset is "
                "applied twice; pass the raw weight",
                make_fix(f"Pass the raw weight `{raw}`", [ctx.replace(arg, raw)], Applicability.SAFE),
            )
        for call, _func, cls, handle, anchor in self.reused_rms_calls():
            arg = weight_argument(call)
            if self.contract_of(handle) != "offset" or arg is None or offset_inner(arg) is None:
                continue
            self.report(
                anchor,
                f"`{anchor.id}` (reused for `{cls}`) passes `{ast.unparse(arg)}` to this spec's offset RMSNorm handle "
                f"(variant `{handle.raw_variant or handle.variant}`), which adds the 1 itself: the offset is applied "
                "twice",
            )
