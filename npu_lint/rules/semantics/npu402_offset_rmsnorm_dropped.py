"""NPU402 offset-rmsnorm-dropped."""

from __future__ import annotations

import ast
import os

from npu_lint.core.astutil import assigned_name
from npu_lint.core.astutil import walk as _walk
from npu_lint.core.diagnostics import Applicability
from npu_lint.rules._handles import call_arg
from npu_lint.rules.base import Context, Example, make_fix
from npu_lint.rules.semantics._shared import (
    _RmsNormCalls,
    eager_weight_products,
    raw_weight_attr,
    receiver_of,
    weight_argument,
    weight_products,
)
from npu_lint.veomni.norms import variant_for_contract


class OffsetRmsNormDropped(_RmsNormCalls):
    code = "NPU402"
    name = "offset-rmsnorm-dropped"
    summary = (
        "A zero-initialised (Gemma-style) RMSNorm weight is passed raw to a `standard` RMSNorm handle, or a "
        "standard RMSNorm's weight (upstream: ones, no offset) is initialised to zeros."
    )
    why = (
        "An RMSNorm whose weight is initialised to zeros computes `norm(x) * (1 + weight)`. The `standard` "
        "variant computes `norm(x) * weight`: with the raw weight it multiplies by roughly zero, dropping the "
        "offset. Such a norm needs the offset variant (which adds the 1 inside the op; `qwen3_5` in VeOmni's trees, "
        "`offset` in some catalogs: the fix takes the name the tree's own registry uses). The initialisation is "
        "read from the class's `__init__` in the file, from a spec's `__init__` patch, or from the upstream "
        "transformers class (read from the installed source, not imported). Passing `1 + w` to a `standard` "
        "slot (OpSlot-era Gemma 3) is correct and not reported."
        " The eager math of the file's RMSNorm classes (a generated copy's fallback path, an in-tree model, a spec's replacement of an upstream norm's forward) is read too: a zero-initialised weight multiplied in raw (`output * self.weight.float()`) is reported; `1 + w`, `w + 1`, `w.add(1)` and the offset expanded into a sum (`x + x * w`, `x * w + x`: the applied scale is `1 + w`) keep the offset."
        " A kernel function of the tree's own kernel package (`veomni.ops.kernels...`), imported at module level or inside the forward, is judged by what its source does with the weight (read from the tree, never imported; by its name without the tree): a functional kernel that uses it raw, or a method-style one (`kernel(self, x)`) that multiplies by the module's raw weight, drops the offset. A forward another model's spec defines and this spec registers for a zero-initialised norm (`override_method(..., replacement=imported)`) is reported when its eager math multiplies by the raw weight."
        " The weight's initialisation may be a fill: a parameter created empty and filled by `nn.init.zeros_`/`ones_`/`constant_`, `.zero_()` or `.fill_()` (in `__init__` or another method of the class) counts as zeros or ones; a vendor kernel reached through a helper function of the file (`def _npu_norm(x, w, eps)`, or `(module, x)`) is judged like the kernel, and torch_npu's `gamma=` keyword is read as the weight."
        " torch's own `F.rms_norm(x, shape, weight, eps)` is a standard kernel (weight third, eps fourth)."
        " Forwards a device patch installs for its target norm (a factory's inner forward, a `replace_forward` backend entry naming a kernel of the tree) are read against that class too."
        " A handle declared twice in one body (a generated file re-declaring its module slot after a model-specific block, an `__init__` re-binding `self.<attr>`) is judged by its last straight-line declaration, the one every later call sees; declarations under a branch are alternatives and are not judged."
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
                    self.veomni_rms_norm = VeomniOp("rms_norm", "standard", resolve_op_impl("rms_norm_implementation"))

                def forward(self, x):
                    return self.veomni_rms_norm(x, self.weight, eps=self.eps)
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
                    return self.veomni_rms_norm(x, self.weight, eps=self.eps)
            """,
            title="zeros in the class's own __init__",
        ),
        Example(
            """
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.gemma3.modeling_gemma3", target_file="x.py")


            @config.override_method("Gemma3RMSNorm.__init__")
            def gemma3_rmsnorm_init_patched(self, dim, eps=1e-6):
                super().__init__()
                self.eps = eps
                self.veomni_rms_norm = VeomniOp("rms_norm", "standard", resolve_op_impl("rms_norm_implementation"))


            @config.override_method("Gemma3RMSNorm.forward")
            def gemma3_rmsnorm_forward_patched(self, x):
                return self.veomni_rms_norm(x, self.weight, eps=self.eps)
            """,
            fixed="""
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.gemma3.modeling_gemma3", target_file="x.py")


            @config.override_method("Gemma3RMSNorm.__init__")
            def gemma3_rmsnorm_init_patched(self, dim, eps=1e-6):
                super().__init__()
                self.eps = eps
                self.veomni_rms_norm = VeomniOp("rms_norm", "offset", resolve_op_impl("rms_norm_implementation"))


            @config.override_method("Gemma3RMSNorm.forward")
            def gemma3_rmsnorm_forward_patched(self, x):
                return self.veomni_rms_norm(x, self.weight, eps=self.eps)
            """,
            path="veomni/models/transformers/gemma3/gemma3_gpu_patch_gen_config.py",
            title="zeros in the upstream class (transformers' Gemma3RMSNorm)",
        ),
        Example(
            """
            import torch
            import torch_npu
            from torch import nn


            class ToyGemmaRMSNorm(nn.Module):
                def __init__(self, dim, eps=1e-6):
                    super().__init__()
                    self.eps = eps
                    self.weight = nn.Parameter(torch.zeros(dim))

                def forward(self, x):
                    return torch_npu.npu_rms_norm(x, self.weight, epsilon=self.eps)[0]
            """,
            fixed="""
            import torch
            import torch_npu
            from torch import nn


            class ToyGemmaRMSNorm(nn.Module):
                def __init__(self, dim, eps=1e-6):
                    super().__init__()
                    self.eps = eps
                    self.weight = nn.Parameter(torch.zeros(dim))

                def forward(self, x):
                    return torch_npu.npu_rms_norm(x, 1.0 + self.weight, epsilon=self.eps)[0]
            """,
            title="a vendor kernel given a zero-initialised weight raw",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig, create_patch_from_external

            config = PatchConfig(source_module="transformers.models.gemma3.modeling_gemma3", target_file="x.py")
            config.patches.append(
                create_patch_from_external(
                    target="Gemma3RMSNorm",
                    replacement_module="liger_kernel.transformers.rms_norm",
                    replacement_name="LigerRMSNorm",
                )
            )
            """,
            path="veomni/models/transformers/gemma3/gemma3_gpu_patch_gen_config.py",
            title="a Gemma-style class replaced by a standard vendor class",
        ),
        Example(
            """
            import torch
            from torch import nn


            class ToyRMSNorm(nn.Module):
                def __init__(self, dim, eps=1e-6):
                    super().__init__()
                    self.eps = eps
                    self.weight = nn.Parameter(torch.zeros(dim))

                def _norm(self, x):
                    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

                def forward(self, x):
                    output = self._norm(x.float())
                    output = output * self.weight.float()
                    return output.type_as(x)
            """,
            fixed="""
            import torch
            from torch import nn


            class ToyRMSNorm(nn.Module):
                def __init__(self, dim, eps=1e-6):
                    super().__init__()
                    self.eps = eps
                    self.weight = nn.Parameter(torch.zeros(dim))

                def _norm(self, x):
                    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

                def forward(self, x):
                    output = self._norm(x.float())
                    output = output * (1.0 + self.weight.float())
                    return output.type_as(x)
            """,
            path="veomni/models/transformers/toy/modeling_toy.py",
            title="the eager path of a zero-initialised RMSNorm (generated copies are reported, not fixed) multiplies by the raw weight",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.gemma.modeling_gemma", target_file="x.py")


            @config.override_method("GemmaRMSNorm.forward")
            def gemma_rmsnorm_forward_patched(self, x):
                if fused_norm is not None:
                    return fused_norm(x, self.weight, self.eps)
                normed = self._norm(x.float())
                return (normed * self.weight.float()).type_as(x)
            """,
            fixed="""
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.gemma.modeling_gemma", target_file="x.py")


            @config.override_method("GemmaRMSNorm.forward")
            def gemma_rmsnorm_forward_patched(self, x):
                if fused_norm is not None:
                    return fused_norm(x, self.weight, self.eps)
                normed = self._norm(x.float())
                return (normed * (1.0 + self.weight.float())).type_as(x)
            """,
            path="veomni/models/transformers/gemma/gemma_gpu_patch_gen_config.py",
            title="a spec's replacement forward keeps the eager fallback of an upstream zero-initialised norm without the offset",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.gemma2.modeling_gemma2", target_file="x.py")


            @config.override_method("Gemma2RMSNorm.forward")
            def gemma2_norm_forward_npu(self, hidden):
                from veomni.ops.kernels.rms_norm.npu import fused_rms_norm_npu

                return fused_rms_norm_npu(hidden, self.weight, self.eps)
            """,
            fixed="""
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.gemma2.modeling_gemma2", target_file="x.py")


            @config.override_method("Gemma2RMSNorm.forward")
            def gemma2_norm_forward_npu(self, hidden):
                from veomni.ops.kernels.rms_norm.npu import fused_rms_norm_npu

                return fused_rms_norm_npu(hidden, 1.0 + self.weight, self.eps)
            """,
            path="veomni/models/transformers/gemma2/gemma2_npu_patch_gen_config.py",
            title="a standard kernel function of the tree, imported inside the forward, given a zero-initialised weight",
        ),
        Example(
            """
            import torch_npu
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.gemma2.modeling_gemma2", target_file="x.py")


            def _npu_norm(x, scale, eps):
                return torch_npu.npu_rms_norm(x, scale, epsilon=eps)[0]


            @config.override_method("Gemma2RMSNorm.forward")
            def gemma2_norm_forward_npu(self, hidden):
                return _npu_norm(hidden, self.weight, self.eps)
            """,
            fixed="""
            import torch_npu
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.gemma2.modeling_gemma2", target_file="x.py")


            def _npu_norm(x, scale, eps):
                return torch_npu.npu_rms_norm(x, scale, epsilon=eps)[0]


            @config.override_method("Gemma2RMSNorm.forward")
            def gemma2_norm_forward_npu(self, hidden):
                return _npu_norm(hidden, 1.0 + self.weight, self.eps)
            """,
            path="veomni/models/transformers/gemma2/gemma2_npu_patch_gen_config.py",
            title="a vendor kernel reached through a helper of the file",
        ),
        Example(
            """
            import torch
            from torch import nn
            from veomni.ops import VeomniOp


            class ToyShiftedNorm(nn.Module):
                def __init__(self, dim, eps=1e-6):
                    super().__init__()
                    self.eps = eps
                    self.weight = nn.Parameter(torch.empty(dim))
                    self.fused = VeomniOp("rms_norm", "standard", "eager")
                    self.reset_parameters()

                def reset_parameters(self):
                    nn.init.zeros_(self.weight)

                def forward(self, x):
                    return self.fused(x, self.weight, eps=self.eps)
            """,
            fixed="""
            import torch
            from torch import nn
            from veomni.ops import VeomniOp


            class ToyShiftedNorm(nn.Module):
                def __init__(self, dim, eps=1e-6):
                    super().__init__()
                    self.eps = eps
                    self.weight = nn.Parameter(torch.empty(dim))
                    self.fused = VeomniOp("rms_norm", "offset", "eager")
                    self.reset_parameters()

                def reset_parameters(self):
                    nn.init.zeros_(self.weight)

                def forward(self, x):
                    return self.fused(x, self.weight, eps=self.eps)
            """,
            path="veomni/models/transformers/toy/modeling_toy.py",
            title="a weight created empty and zero-filled by another method",
        ),
        Example(
            """
            import torch.nn.functional as F
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.gemma2.modeling_gemma2", target_file="x.py")


            @config.override_method("Gemma2RMSNorm.forward")
            def gemma2_norm_forward_patched(self, hidden):
                out = F.rms_norm(hidden.float(), hidden.shape[-1:], self.weight.float(), self.eps)
                return out.type_as(hidden)
            """,
            fixed="""
            import torch.nn.functional as F
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.gemma2.modeling_gemma2", target_file="x.py")


            @config.override_method("Gemma2RMSNorm.forward")
            def gemma2_norm_forward_patched(self, hidden):
                out = F.rms_norm(hidden.float(), hidden.shape[-1:], 1.0 + self.weight.float(), self.eps)
                return out.type_as(hidden)
            """,
            path="veomni/models/transformers/gemma2/gemma2_gpu_patch_gen_config.py",
            title="torch's functional rms_norm (a standard norm) given a zero-initialised weight",
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
                    # OpSlot-era Gemma 3: the caller adds the 1 for a standard slot
                    return veomni_rms_norm(x, 1.0 + self.weight, self.eps)
            """
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.gemma.modeling_gemma", target_file="x.py")


            @config.override_method("GemmaRMSNorm.forward")
            def gemma_rmsnorm_forward_patched(self, x):
                normed = self._norm(x.float())
                return (normed * self.weight.float().add(1.0)).type_as(x)
            """,
            path="veomni/models/transformers/gemma/gemma_gpu_patch_gen_config.py",
        ),
        Example(
            """
            import torch
            from torch import nn
            from veomni.ops import VeomniOp


            class ToyRMSNorm(nn.Module):
                def __init__(self, dim, impl, eps=1e-6):
                    super().__init__()
                    self.variance_epsilon = eps
                    self.weight = nn.Parameter(torch.ones(dim))
                    self.veomni_rms_norm = VeomniOp("rms_norm", "standard", impl)

                def forward(self, x):
                    return self.veomni_rms_norm(x, self.weight, eps=self.variance_epsilon)
            """
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.gemma2.modeling_gemma2", target_file="x.py")


            @config.override_method("Gemma2RMSNorm.forward")
            def gemma2_norm_forward_npu(self, hidden):
                from veomni.ops.kernels.rms_norm.npu import gemma_rms_norm_npu

                return gemma_rms_norm_npu(hidden, self.weight, self.eps)
            """,
            path="veomni/models/transformers/gemma2/gemma2_npu_patch_gen_config.py",
        ),
    )
    fix_safety = (
        "Unsafe (changes the numerics, to the intended ones): the handle's declared variant becomes `offset` "
        "(`qwen3_5` for an OpSlot). Offered only when every call of that handle in the file passes a "
        "zero-initialised weight raw, and the declaration is a literal in this file."
    )

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        """Model code, and the kernel modules that define norm modules or forwards (``npu_rms_norm_gated.py``)."""
        return ctx.source.kind.model_code or (
            ctx.source.kind.kernel and not ctx.source.kind.test and "rms_norm" in ctx.source.text
        )

    def finish(self) -> None:
        self.report_init_faults("zeros")
        self._vendor_and_external()
        self._eager()
        calls = self.all_rms_calls()
        if not calls:
            return
        findings = []
        uses: dict[int, int] = {}
        for call, func, cls, handle, anchor in calls:
            uses[id(handle.call)] = uses.get(id(handle.call), 0) + 1
            if self.contract_of(handle) != "standard":
                continue
            arg = weight_argument(call)
            attr = raw_weight_attr(arg, receiver_of(func)) if arg is not None else None
            if attr is None or not self.zero_init(cls, attr):
                continue
            findings.append((call, anchor or arg, cls, handle))
        flagged: dict[int, int] = {}
        for _call, _arg, _cls, handle in findings:
            flagged[id(handle.call)] = flagged.get(id(handle.call), 0) + 1
        at_declaration: set[int] = set()
        for _call, arg, cls, handle in findings:
            fix = None
            key = id(handle.call)
            if flagged[key] == uses[key]:
                fix = self.variant_fix(
                    handle,
                    "offset",
                    "changes the normalisation to norm(x) * (1 + weight), as the zero-initialised weight intends",
                )
            where = arg
            declared = call_arg(handle.call, 1, "variant")
            if flagged[key] == uses[key] and handle.block is not None and declared is not None:
                # the same, for a handle declared in this spec's post-import block (also when its calls sit in a
                # function reused from another spec: this file's declaration is what the fix edits)
                if key in at_declaration:
                    continue
                at_declaration.add(key)
                where = handle.block.position(declared)  # type: ignore[assignment]
            elif (
                fix is not None
                and handle.block is None
                and declared is not None
                and any(n is handle.call for n in _walk(self.ctx.tree))
            ):
                # every call of the handle is given the zero-initialised weight raw: the defect (and the fix) is
                # the declared variant, reported where the handle is built
                if key in at_declaration:
                    continue
                at_declaration.add(key)
                where = declared
            self.report(
                where,  # type: ignore[arg-type]
                f"`{cls}` initialises its weight to zeros (output `norm(x) * (1 + weight)`), but the raw weight is "
                "passed to a `standard` RMSNorm handle: the offset is dropped; use the "
                f"`{variant_for_contract(self.ctx.project, 'offset', handle.kind)}` variant",
                fix,
            )

    def _eager(self) -> None:
        """The eager math of a zero-initialised RMSNorm (a generated copy's fallback path, an in-tree class) that
        multiplies by the raw weight."""
        if "RMSNorm" not in self.ctx.source.text and "RmsNorm" not in self.ctx.source.text:
            return
        for cls, node, attr, offset in eager_weight_products(self.ctx.tree):
            if offset or not self.zero_init(cls, attr) or self._expanded_via_local(node):
                continue
            text = self.ctx.source.segment(node)
            self.report(
                node,
                f"`{cls}` initialises `{attr}` to zeros (output `norm(x) * (1 + {attr})`), but its eager path "
                f"multiplies by the raw `{text}`: the offset is dropped",
                make_fix(
                    f"Multiply by `(1.0 + {text})`",
                    [self.ctx.replace(node, f"(1.0 + {text})")],
                    Applicability.UNSAFE,
                    "changes the scale to norm(x) * (1 + weight), as the zero-initialised weight intends",
                ),
            )

    def _expanded_via_local(self, weight: ast.expr) -> bool:
        """`scaled = x * w` then `x + scaled`: the offset expanded into a sum over a local (`x * (1 + w)`)."""
        tree = self.ctx.tree
        prod = next(
            (
                n
                for n in _walk(tree)
                if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult) and weight in (n.left, n.right)
            ),
            None,
        )
        if prod is None:
            return False
        other = ast.dump(prod.right if prod.left is weight else prod.left)
        local = assigned_name(tree, prod)
        if local is None:
            return False
        return any(
            isinstance(n, ast.BinOp)
            and isinstance(n.op, ast.Add)
            and any(
                isinstance(a, ast.Name) and a.id == local and ast.dump(b) == other
                for a, b in ((n.left, n.right), (n.right, n.left))
            )
            for n in _walk(tree)
        )

    def _vendor_and_external(self) -> None:
        ctx = self.ctx
        for name_node, cls, func, path in self.reused_functions():
            for side, attr, offset in weight_products(func):
                if not offset and self.zero_init(cls, attr):
                    self.report(
                        name_node,
                        f"`{name_node.id}` (from {os.path.basename(path)}) multiplies by the raw `{ast.unparse(side)}`, "
                        f"but `{cls}`, which it is registered for here, initialises `{attr}` to zeros (output "
                        f"`norm(x) * (1 + {attr})`): the offset is dropped",
                    )
                    break
        for call, _func, cls, qual, kernel in self.method_kernel_calls():
            if kernel.contract == "standard" and self.zero_init(cls, "weight"):
                self.report(
                    call,
                    f"`{cls}` initialises its weight to zeros (output `norm(x) * (1 + weight)`), but `{qual}` "
                    "multiplies by the module's raw `weight`: the offset is dropped",
                )
        for call, func, cls, qual in self.vendor_rms_calls():
            if self.kernel_contract(qual, call) != "standard":
                continue
            arg = weight_argument(call)
            attr = raw_weight_attr(arg, receiver_of(func)) if arg is not None else None
            if arg is None or attr is None or not self.zero_init(cls, attr):
                continue
            text = ctx.source.segment(arg)
            fix = make_fix(
                f"Pass `1.0 + {text}`",
                [ctx.replace(arg, f"1.0 + {text}")],
                Applicability.UNSAFE,
                "changes the scale to norm(x) * (1 + weight), as the zero-initialised weight intends",
            )
            self.report(
                arg,
                f"`{cls}` initialises its weight to zeros (output `norm(x) * (1 + weight)`), but `{qual}` is a "
                "standard RMSNorm kernel given the raw weight: the offset is dropped",
                fix,
            )
        for node, target, dotted, contract, mine in self.external_rms():
            if contract == "standard" and mine.gemma_style:
                self.report(
                    node,
                    f"`{target}` is a Gemma-style RMSNorm (`norm(x) * (1 + weight)`, weight initialised to zeros) but "
                    f"is replaced by `{dotted}`, a standard RMSNorm: the offset is dropped; use an offset "
                    "implementation",
                )
