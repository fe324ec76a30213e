"""NPU405 rmsnorm-eps-attribute."""

from __future__ import annotations

import ast

from npu_lint.core.diagnostics import Applicability
from npu_lint.rules._handles import call_arg
from npu_lint.rules.base import Example, make_fix
from npu_lint.rules.semantics._shared import _RmsNormCalls, receiver_of

_EPS_KEYWORDS = ("eps", "epsilon")


def _eps_argument(call: ast.Call) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg in _EPS_KEYWORDS:
            return kw.value
    return call_arg(call, 2, "eps")


class RmsNormEpsAttribute(_RmsNormCalls):
    code = "NPU405"
    name = "rmsnorm-eps-attribute"
    summary = "An RMSNorm kernel call reads an eps attribute that the model's RMSNorm class never sets."
    why = (
        "Standard RMSNorm classes keep eps in `self.variance_epsilon`, Gemma-style ones in `self.eps`. A migration "
        "that copies a handle call from one family to the other passes an attribute the class does not have: "
        "an AttributeError on the first step at best, or a class attribute of the same name with another value. "
        "The attributes are read from the class's effective `__init__` (the spec's `__init__` patch, the class "
        "in the file, or the upstream transformers class), and the right one from the upstream forward."
        " A kernel wrapper written as a module-level forward of an in-tree norm (`def norm_forward_npu(self, x)`, "
        "or with the module under another name as its first parameter) is read against the one norm class its "
        "package defines."
    )
    bad = (
        Example(
            """
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.gemma3.modeling_gemma3", target_file="x.py")


            @config.override_method("Gemma3RMSNorm.forward")
            def gemma3_rmsnorm_forward_patched(self, x):
                op = VeomniOp("rms_norm", "qwen3_5", resolve_op_impl("rms_norm_implementation"))
                return op(x, self.weight, eps=self.variance_epsilon)
            """,
            fixed="""
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.gemma3.modeling_gemma3", target_file="x.py")


            @config.override_method("Gemma3RMSNorm.forward")
            def gemma3_rmsnorm_forward_patched(self, x):
                op = VeomniOp("rms_norm", "qwen3_5", resolve_op_impl("rms_norm_implementation"))
                return op(x, self.weight, eps=self.eps)
            """,
            path="veomni/models/transformers/gemma3/gemma3_gpu_patch_gen_config.py",
            title="a Llama-style eps attribute in Gemma 3's RMSNorm",
        ),
    )
    good = (
        Example(
            """
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3.modeling_qwen3", target_file="x.py")


            @config.override_method("Qwen3RMSNorm.forward")
            def qwen3_rmsnorm_forward_patched(self, x):
                op = VeomniOp("rms_norm", "standard", resolve_op_impl("rms_norm_implementation"))
                return op(x, self.weight, eps=self.variance_epsilon)
            """,
            path="veomni/models/transformers/qwen3/qwen3_gpu_patch_gen_config.py",
        ),
    )
    fix_safety = (
        "Safe: the attribute becomes the one the class's `__init__` assigns and the upstream forward reads "
        "(`self.variance_epsilon` <-> `self.eps`); offered only when the class's `__init__` was read and sets it."
    )

    def finish(self) -> None:
        ctx = self.ctx
        calls = [(c, f, cls) for c, f, cls, _h in self.rms_calls()]
        calls += [(c, f, cls) for c, f, cls, _q in self.vendor_rms_calls()]
        for call, func, cls in calls:
            arg = _eps_argument(call)
            if not (
                isinstance(arg, ast.Attribute)
                and isinstance(arg.value, ast.Name)
                and arg.value.id == receiver_of(func)
            ):
                continue
            attrs = self.assigned_attrs(cls)
            if attrs is None or arg.attr in attrs:
                continue
            contract = self.class_contract(cls)
            right = contract.eps_attr if contract is not None else None
            if right is None or right == arg.attr or right not in attrs:
                continue
            recv = arg.value.id  # type: ignore[attr-defined]
            fix = make_fix(
                f"Read `{recv}.{right}`", [ctx.replace(arg, f"{recv}.{right}")], Applicability.SAFE
            )
            self.report(
                arg,
                f"`{cls}` never sets `self.{arg.attr}`: its eps lives in `self.{right}`",
                fix,
            )
