"""NPU403 standard-rmsnorm-offset-variant."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import walk as _walk
from npu_lint.rules._handles import call_arg
from npu_lint.rules.base import Context, Example
from npu_lint.rules.semantics._shared import (
    _RmsNormCalls,
    norm_code,
    raw_weight_attr,
    receiver_of,
    weight_argument,
)


class StandardRmsNormOffsetVariant(_RmsNormCalls):
    code = "NPU403"
    name = "standard-rmsnorm-offset-variant"
    summary = (
        "A standard (ones-initialised) RMSNorm weight is passed to an offset RMSNorm handle, which adds 1."
    )
    why = (
        "A standard RMSNorm (Llama, Qwen3, Qwen3-VL's text norm) initialises its weight to ones and computes "
        "`norm(x) * weight`. The offset variant (`qwen3_5` in VeOmni's trees, `offset` in some catalogs) "
        "computes `norm(x) * (1 + weight)`: given a standard weight it scales every activation by about 2, and "
        "a loaded checkpoint's weights are off by one everywhere. The weight's initialiser is read from the "
        "class's `__init__` (in the file, a spec's `__init__` patch, or the upstream transformers class); the "
        "variant's contract from the tree's registry names."
        " When every call of a handle declared in the file contradicts its variant, the finding is reported once, "
        "at the declared variant (where the defect and its fix are); otherwise at each call's weight."
        " Kernel functions of the tree (`veomni.ops.kernels...`) are read from their source: one that adds 1 to the weight it is given (or, method-style, to the module's weight) is an offset kernel."
        " A norm class replaced by another model's norm class (transformers', or the tree's own, read from source) is judged by that class's contract."
        " Liger's functional RMSNorm adds its `offset` argument: a literal 1 makes it an offset kernel, 0 (or none, the default) a standard one."
        " A handle declared twice in one body is judged by its last straight-line declaration; the tree's kernel modules that mention `rms_norm` (in-tree wrappers, `veomni/ops/kernels/...`) are read as model code is."
    )
    bad = (
        Example(
            """
            import torch
            from torch import nn
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl


            class ToyRMSNorm(nn.Module):
                def __init__(self, dim, eps=1e-6):
                    super().__init__()
                    self.variance_epsilon = eps
                    self.weight = nn.Parameter(torch.ones(dim))
                    self.veomni_rms_norm = VeomniOp("rms_norm", "qwen3_5", resolve_op_impl("rms_norm_implementation"))

                def forward(self, x):
                    return self.veomni_rms_norm(x, self.weight, eps=self.variance_epsilon)
            """,
            fixed="""
            import torch
            from torch import nn
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl


            class ToyRMSNorm(nn.Module):
                def __init__(self, dim, eps=1e-6):
                    super().__init__()
                    self.variance_epsilon = eps
                    self.weight = nn.Parameter(torch.ones(dim))
                    self.veomni_rms_norm = VeomniOp("rms_norm", "standard", resolve_op_impl("rms_norm_implementation"))

                def forward(self, x):
                    return self.veomni_rms_norm(x, self.weight, eps=self.variance_epsilon)
            """,
            title="ones in the class's own __init__, offset variant named as VeOmni's trees name it",
        ),
        Example(
            '''
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3.modeling_qwen3", target_file="x.py")
            config.add_post_import_block(
                """
                from veomni.ops.dispatch import OpSlot
                veomni_rms_norm = OpSlot("rms_norm", "qwen3_5")
                """
            )


            @config.override_method("Qwen3RMSNorm.forward")
            def qwen3_rmsnorm_forward_patched(self, hidden_states):
                if veomni_rms_norm.use_non_eager_impl:
                    return veomni_rms_norm(hidden_states, self.weight, self.variance_epsilon)
                return hidden_states
            ''',
            fixed='''
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3.modeling_qwen3", target_file="x.py")
            config.add_post_import_block(
                """
                from veomni.ops.dispatch import OpSlot
                veomni_rms_norm = OpSlot("rms_norm", "standard")
                """
            )


            @config.override_method("Qwen3RMSNorm.forward")
            def qwen3_rmsnorm_forward_patched(self, hidden_states):
                if veomni_rms_norm.use_non_eager_impl:
                    return veomni_rms_norm(hidden_states, self.weight, self.variance_epsilon)
                return hidden_states
            ''',
            path="veomni/models/transformers/qwen3/qwen3_gpu_patch_gen_config.py",
            title="ones in the upstream class (transformers' Qwen3RMSNorm), OpSlot qwen3_5 slot",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.mistral.modeling_mistral", target_file="x.py")


            @config.override_method("MistralRMSNorm.forward")
            def mistral_norm_forward_npu(self, hidden):
                from veomni.ops.kernels.rms_norm.npu import gemma_rms_norm_npu

                return gemma_rms_norm_npu(hidden, self.weight, self.variance_epsilon)
            """,
            path="veomni/models/transformers/mistral/mistral_npu_patch_gen_config.py",
            title="an offset kernel function of the tree given a ones-initialised weight",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig, create_patch_from_external

            config = PatchConfig(source_module="transformers.models.mistral.modeling_mistral", target_file="x.py")
            config.patches.append(
                create_patch_from_external(
                    target="MistralRMSNorm",
                    replacement_module="transformers.models.gemma2.modeling_gemma2",
                    replacement_name="Gemma2RMSNorm",
                )
            )
            """,
            path="veomni/models/transformers/mistral/mistral_gpu_patch_gen_config.py",
            title="a standard norm class replaced by another model's offset norm class",
        ),
    )
    good = (
        Example(
            """
            import torch
            from torch import nn
            from veomni.ops import VeomniOp


            class ToyGemmaRMSNorm(nn.Module):
                def __init__(self, dim, impl, eps=1e-6):
                    super().__init__()
                    self.eps = eps
                    self.weight = nn.Parameter(torch.zeros(dim))
                    self.veomni_rms_norm = VeomniOp("rms_norm", "qwen3_5", impl)

                def forward(self, x):
                    return self.veomni_rms_norm(x, self.weight, eps=self.eps)
            """
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.mistral.modeling_mistral", target_file="x.py")


            @config.override_method("MistralRMSNorm.forward")
            def mistral_norm_forward_npu(self, hidden):
                from veomni.ops.kernels.rms_norm.npu import fused_rms_norm_npu

                return fused_rms_norm_npu(hidden, self.weight, self.variance_epsilon)
            """,
            path="veomni/models/transformers/mistral/mistral_npu_patch_gen_config.py",
        ),
        Example(
            """
            from liger_kernel.ops.rms_norm import LigerRMSNormFunction
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.mistral.modeling_mistral", target_file="x.py")


            @config.override_method("MistralRMSNorm.forward")
            def mistral_norm_forward_patched(self, hidden):
                return LigerRMSNormFunction.apply(hidden, self.weight, self.variance_epsilon, 0.0, "llama", False, None)
            """,
            path="veomni/models/transformers/mistral/mistral_gpu_patch_gen_config.py",
        ),
    )
    fix_safety = (
        "Unsafe (changes the numerics, to the intended ones): the handle's declared variant becomes the standard "
        "one, named as the tree's registry names it. Offered only when every call of that handle in the file "
        "passes a ones-initialised weight raw, and the declaration is a literal in this file."
    )

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return norm_code(ctx)

    def finish(self) -> None:
        for node, target, dotted, contract, mine in self.external_rms():
            if contract == "offset" and mine.standard_style:
                self.report(
                    node,
                    f"`{target}` is a standard RMSNorm (weight initialised to ones, `norm(x) * weight`) but is "
                    f"replaced by `{dotted}`, an offset RMSNorm that multiplies by `1 + weight`",
                )
        for call, func, cls, qual in self.vendor_rms_calls():
            if self.kernel_contract(qual, call) != "offset":
                continue
            arg = weight_argument(call)
            attr = raw_weight_attr(arg, receiver_of(func)) if arg is not None else None
            if arg is None or attr is None or self.weight_kind(cls, attr) != "ones":
                continue
            self.report(
                arg,
                f"`{cls}` initialises `{attr}` to ones (output `norm(x) * {attr}`), but `{qual}` is an offset "
                f"RMSNorm kernel that multiplies by `1 + {attr}`: every norm is scaled by about 2; use a standard "
                "kernel",
            )
        for call, _func, cls, qual, kernel in self.method_kernel_calls():
            if kernel.contract == "offset" and self.weight_kind(cls, "weight") == "ones":
                self.report(
                    call,
                    f"`{cls}` initialises its weight to ones (output `norm(x) * weight`), but `{qual}` multiplies "
                    "the module's weight by `1 + weight`: every norm is scaled by about 2",
                )
        calls = self.all_rms_calls()
        if not calls:
            return
        uses: dict[int, int] = {}
        findings = []
        for call, func, cls, handle, anchor in calls:
            uses[id(handle.call)] = uses.get(id(handle.call), 0) + 1
            if self.contract_of(handle) != "offset":
                continue
            arg = weight_argument(call)
            attr = raw_weight_attr(arg, receiver_of(func)) if arg is not None else None
            if attr is None or self.weight_kind(cls, attr) != "ones":
                continue
            findings.append((anchor or arg, cls, handle))
        flagged: dict[int, int] = {}
        for _arg, _cls, handle in findings:
            flagged[id(handle.call)] = flagged.get(id(handle.call), 0) + 1
        at_declaration: set[int] = set()
        for arg, cls, handle in findings:
            fix = None
            if flagged[id(handle.call)] == uses[id(handle.call)]:
                fix = self.variant_fix(
                    handle,
                    "standard",
                    "changes the normalisation to norm(x) * weight, as the ones-initialised weight intends",
                )
            variant = handle.raw_variant or handle.variant
            where: ast.AST = arg
            declared = call_arg(handle.call, 1, "variant")
            if (
                fix is not None
                and handle.block is None
                and declared is not None
                and any(n is handle.call for n in _walk(self.ctx.tree))
            ):
                # every call of the handle is wrong: the defect (and the fix) is the declared variant
                if id(handle.call) in at_declaration:
                    continue
                at_declaration.add(id(handle.call))
                where = declared
            self.report(
                where,
                f"`{cls}` initialises its weight to ones (output `norm(x) * weight`), but it is passed to an offset "
                f"RMSNorm handle (variant `{variant}`), which multiplies by `1 + weight`; use the standard variant",
                fix,
            )
