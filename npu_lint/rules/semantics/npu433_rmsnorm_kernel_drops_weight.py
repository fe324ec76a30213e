"""NPU433 rmsnorm-kernel-drops-weight."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import nodes_of
from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (memoised per file)
from npu_lint.rules._handles import HANDLES, call_name, op_variant
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.semantics._shared import functions_of, receiver_of, weight_argument
from npu_lint.veomni.norms import unread_weights
from npu_lint.veomni.upstream import last_name

_WEIGHTS = ("weight", "scale", "gamma")


def _is_none(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _norm_kernel(call: ast.Call, func: ast.AST) -> bool:
    """An RMSNorm kernel call: named so (`veomni_rms_norm`, `npu_rms_norm`, `self.rms_kernel`), or a norm
    kernel called from an RMSNorm function (not a batch/layer/group norm)."""
    name = (last_name(call.func) or "").lower()
    if any(
        other in name for other in ("batch_norm", "layer_norm", "group_norm", "instance_norm", "layernorm")
    ):
        return False
    rms = "rms" in name or ("norm" in name and "rms" in getattr(func, "name", "").lower())
    return rms and len(call.args) + len(call.keywords) >= 2


def _weight_reads(func: ast.AST, receiver: str, skip: ast.AST) -> list[str]:
    """The module's weight attributes the function reads outside ``skip`` (`self.weight`, `module.gamma`)."""
    inside = {id(n) for n in _walk(skip)}
    out: list[str] = []
    for n in _walk(func):
        if (
            isinstance(n, ast.Attribute)
            and isinstance(n.ctx, ast.Load)
            and isinstance(n.value, ast.Name)
            and n.value.id == receiver
            and n.attr in _WEIGHTS
            and id(n) not in inside
            and n.attr not in out
        ):
            out.append(n.attr)
    return out


def _weight_optional(func: ast.AST, attrs: list[str]) -> bool:
    """The function branches on whether the weight exists (`if self.weight is None`, `elementwise_affine`)."""
    for n in _walk(func):
        test = n.test if isinstance(n, (ast.If, ast.IfExp)) else None
        if test is None:
            continue
        text = ast.unparse(test)
        if "affine" in text or any(a in text for a in attrs):
            return True
    return False


def _unweighted_handles(tree: ast.Module) -> set[str]:
    """The names (`veomni_plain_norm`) and `self.<attr>` spellings of the file's handles declared for the
    unweighted RMSNorm row (`OpSlot("rms_norm", "unweighted")`, `VeomniOp("rms_norm", "unweighted", ...)`)."""
    out: set[str] = set()
    for node in nodes_of(tree, ast.Assign):
        if not isinstance(node.value, ast.Call):
            continue
        kind = call_name(node.value)
        if kind not in HANDLES:
            continue
        op, variant = op_variant(node.value, kind)
        if op == "rms_norm" and variant == "unweighted":
            out.update(ast.unparse(t) for t in node.targets if isinstance(t, (ast.Name, ast.Attribute)))
    return out


class RmsNormKernelDropsWeight(Rule):
    code = "NPU433"
    name = "rmsnorm-kernel-drops-weight"
    summary = (
        "An RMSNorm's kernel branch calls a norm kernel with `None` as the weight while the same function's "
        "eager branch scales by the module's weight (`self.weight`), or an RMSNorm class creates a weight that its "
        "forward never reads."
    )
    why = (
        "A dispatching RMSNorm forward has two paths that must compute the same norm: the kernel branch (taken "
        "whenever a fused kernel is bound, the NPU fallback included) and the eager branch. When the eager branch "
        "multiplies by the module's learned weight and the kernel branch hands the kernel `None` (the unweighted "
        "slot's calling convention), the learned scales of every such norm are silently ignored on the kernel path "
        "only, so the NPU run and the GPU eager run train different models. Whichever handle is called (the "
        "weighted one, the unweighted one, a local kernel), the function is compared with itself: a norm kernel "
        "call whose weight argument is `None`, next to a read of the module's weight (`self.weight`, or the "
        "wrapper's `module.weight`) elsewhere in the function; a function that branches on whether the weight "
        "exists (`if self.weight is None`, `elementwise_affine`) is left alone."
        " An RMSNorm class (a spec's, a generated copy's, an in-tree model's) whose `__init__` creates "
        "`self.weight` and whose `forward` (with the helper methods it calls) never reads it, nor hands the module "
        "to a kernel, drops the learned scale on every path (`norms.unread_weights`)."
    )
    bad = (
        Example(
            """
            import torch
            from veomni.ops.dispatch import OpSlot

            veomni_rms_norm = OpSlot("rms_norm", "standard")
            veomni_plain_rms_norm = OpSlot("rms_norm", "unweighted")


            class ToyRMSNorm(torch.nn.Module):
                def __init__(self, dim, eps=1e-6):
                    super().__init__()
                    self.weight = torch.nn.Parameter(torch.ones(dim))
                    self.eps = eps

                def forward(self, x):
                    if veomni_rms_norm.use_non_eager_impl:
                        return veomni_plain_rms_norm(x, None, self.eps)
                    h = x.float()
                    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
                    return (self.weight.float() * h).to(x.dtype)
            """,
            path="veomni/models/transformers/toy/generated/patched_modeling_toy_gpu.py",
            title="a weighted norm routed to the unweighted slot with `None`",
        ),
        Example(
            """
            import torch


            def toy_norm_forward_npu(module, hidden_states):
                if hidden_states.is_contiguous():
                    return module.fused_rms(hidden_states, weight=None, eps=module.variance_epsilon)
                variance = hidden_states.float().pow(2).mean(-1, keepdim=True)
                normed = hidden_states.float() * torch.rsqrt(variance + module.variance_epsilon)
                return module.weight * normed.to(hidden_states.dtype)
            """,
            path="veomni/models/transformers/toy/toy_npu_patch_gen_config.py",
            title="a wrapper's kernel call without the module's weight",
        ),
    )
    good = (
        Example(
            """
            import torch
            from veomni.ops.dispatch import OpSlot

            veomni_rms_norm = OpSlot("rms_norm", "standard")
            veomni_plain_rms_norm = OpSlot("rms_norm", "unweighted")


            class ToyRMSNorm(torch.nn.Module):
                def forward(self, x):
                    if veomni_rms_norm.use_non_eager_impl:
                        return veomni_rms_norm(x, self.weight, self.eps)
                    h = x.float()
                    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
                    return (self.weight.float() * h).to(x.dtype)


            class ToyPlainRMSNorm(torch.nn.Module):
                def forward(self, x):
                    if veomni_plain_rms_norm.use_non_eager_impl:
                        return veomni_plain_rms_norm(x, None, self.eps)
                    return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps).to(x.dtype)


            class ToyOptionalRMSNorm(torch.nn.Module):
                def forward(self, x):
                    if self.weight is None:
                        return veomni_plain_rms_norm(x, None, self.eps)
                    return veomni_rms_norm(x, self.weight, self.eps)
            """,
            path="veomni/models/transformers/toy/generated/patched_modeling_toy_gpu.py",
        ),
    )
    fix_safety = "No fix: which slot the norm belongs to is the author's to decide."
    requires = (("None", "unweighted", "Parameter"), ("norm", "rms", "Norm"))
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def finish(self) -> None:
        if "Parameter" in self.ctx.source.text and "RMSNorm" in self.ctx.source.text:
            for forward, cls in unread_weights(self.ctx.tree):
                self.report(
                    forward,
                    f"`{cls}` creates a learned `weight` in `__init__`, but its `forward` never reads it (nor hands "
                    "the module to a kernel): the checkpoint's norm scales are dropped and the parameter gets no "
                    "gradient; multiply the normalised states by `self.weight` as the upstream norm does",
                )
        seen: set[int] = set()
        unweighted = _unweighted_handles(self.ctx.tree) if "unweighted" in self.ctx.source.text else set()
        for func in functions_of(self.ctx.tree, self.ctx.source.text, "None", *sorted(unweighted)):
            receiver = receiver_of(func)
            for call in nodes_of(func, ast.Call):
                if not (isinstance(call, ast.Call) and id(call) not in seen and _norm_kernel(call, func)):
                    continue
                weight = weight_argument(call)
                declared = ast.unparse(call.func) in unweighted
                if not (_is_none(weight) or (declared and weight is None)):
                    continue
                seen.add(id(call))
                attrs = _weight_reads(func, receiver, call)
                if not attrs or _weight_optional(func, attrs):
                    continue
                given = "`None` as the weight" if weight is not None else "no weight"
                if declared:
                    given += ' (a handle of the `"unweighted"` row)'
                self.report(
                    weight if weight is not None else call,  # type: ignore[arg-type]
                    f"`{ast.unparse(call.func)}` is given {given}, but `{getattr(func, 'name', '?')}` "
                    f"scales by `{receiver}.{attrs[0]}` on its other path: the learned weight is ignored whenever "
                    f"the kernel branch runs (a fused kernel bound, the NPU fallback included); pass "
                    f"`{receiver}.{attrs[0]}` to the weighted kernel",
                )
