"""NPU451 rmsnorm-weight-applied-twice."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import walk as _walk
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.semantics._shared import functions_of, raw_weight_attr, receiver_of, weight_argument
from npu_lint.veomni.upstream import last_name

_WEIGHTS = ("weight", "gamma", "scale")
_PASS_THROUGH = (
    "to",
    "float",
    "half",
    "bfloat16",
    "type",
    "contiguous",
    "view",
    "reshape",
    "type_as",
    "clone",
)


def _rms_kernel(call: ast.Call) -> bool:
    name = (last_name(call.func) or "").lower()
    if any(other in name for other in ("batch_norm", "layer_norm", "group_norm", "layernorm", "gated")):
        return False
    return "rms" in name and ("norm" in name or "function" in ast.unparse(call.func).lower())


def _applied_weight(call: ast.Call, receiver: str) -> str | None:
    """The module weight a fused RMSNorm call applies: the weight it is given (`npu_rms_norm(x, self.weight)`,
    `LigerRMSNormFunction.apply(x, self.weight, ...)`), or the module itself handed to a method-style kernel
    (`rms_norm_forward_npu(self, x)`, which scales by `self.weight`)."""
    if not _rms_kernel(call):
        return None
    weight = weight_argument(call)
    attr = raw_weight_attr(weight, receiver) if weight is not None else None
    if attr in _WEIGHTS:
        return attr
    if (
        call.args
        and isinstance(call.args[0], ast.Name)
        and call.args[0].id == receiver
        and len(call.args) >= 2
    ):
        return "weight"
    return None


def _strip(node: ast.AST) -> ast.AST:
    """``kernel(...)[0].to(dtype)`` -> ``kernel(...)``: indexing and dtype/shape pass-throughs keep the value."""
    while True:
        if isinstance(node, ast.Subscript):
            node = node.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _PASS_THROUGH
        ):
            node = node.func.value
        else:
            return node


class RmsNormWeightAppliedTwice(Rule):
    code = "NPU451"
    name = "rmsnorm-weight-applied-twice"
    summary = (
        "The output of a fused RMSNorm kernel that was given the module's weight (or the module itself) is "
        "multiplied by that weight again."
    )
    why = (
        "`torch_npu.npu_rms_norm(x, gamma, epsilon)`, Liger's `LigerRMSNormFunction.apply(x, weight, ...)`, the "
        "RMSNorm handles and VeOmni's method-style NPU forward `rms_norm_forward_npu(self, x)` all return "
        "`norm(x) * weight`: the learned scale is already in the result. Scaling the result by `self.weight` "
        "again (a copy of the eager `return self.weight * hidden_states` line kept after switching to the "
        "kernel) squares the weight: the NPU path computes `norm(x) * weight**2`, a different model from the "
        "GPU eager path, with no error. The rule follows the kernel's result through indexing, casts and one "
        "local name, within one function."
    )
    bad = (
        Example(
            """
            import torch_npu


            def toy_rmsnorm_forward_npu(self, hidden_states):
                out = torch_npu.npu_rms_norm(hidden_states, self.weight, epsilon=self.variance_epsilon)[0]
                return self.weight * out.to(hidden_states.dtype)
            """,
            path="veomni/models/transformers/toy/toy_npu_patch_gen_config.py",
            title="the eager weight multiply kept after the fused kernel",
        ),
        Example(
            """
            from veomni.ops.kernels.rms_norm.npu import rms_norm_forward_npu


            class ToyRMSNorm:
                def forward(self, x):
                    return rms_norm_forward_npu(self, x) * self.weight
            """,
            path="veomni/models/transformers/toy/generated/patched_modeling_toy_npu.py",
            title="a method-style kernel handed the module, then scaled again",
        ),
    )
    good = (
        Example(
            """
            import torch
            import torch_npu


            def toy_rmsnorm_forward_npu(self, hidden_states):
                if hidden_states.is_npu:
                    return torch_npu.npu_rms_norm(hidden_states, self.weight, epsilon=self.variance_epsilon)[0]
                variance = hidden_states.float().pow(2).mean(-1, keepdim=True)
                normed = hidden_states.float() * torch.rsqrt(variance + self.variance_epsilon)
                return self.weight * normed.to(hidden_states.dtype)
            """,
            path="veomni/models/transformers/toy/toy_npu_patch_gen_config.py",
        ),
    )
    fix_safety = "No fix: drop the extra multiply (the kernel already applies the weight)."
    requires = (("rms", "Rms", "RMS"), ("weight", "gamma"))
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def finish(self) -> None:
        for func in functions_of(self.ctx.tree, self.ctx.source.text, "rms", "Rms", "RMS"):
            receiver = receiver_of(func)
            own = [
                n for n in _walk(func) if not (isinstance(n, (ast.FunctionDef, ast.Lambda)) and n is not func)
            ]
            kernels: dict[int, str] = {}
            for node in own:
                if isinstance(node, ast.Call):
                    attr = _applied_weight(node, receiver)
                    if attr is not None:
                        kernels[id(node)] = attr
            if not kernels:
                continue
            # locals holding a kernel's result (assigned once)
            held: dict[str, str] = {}
            counts: dict[str, int] = {}
            for node in own:
                if isinstance(node, ast.Assign):
                    for t in node.targets:
                        if isinstance(t, ast.Name):
                            counts[t.id] = counts.get(t.id, 0) + 1
            for node in own:
                if (
                    isinstance(node, ast.Assign)
                    and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)
                ):
                    value = _strip(node.value)
                    if id(value) in kernels and counts.get(node.targets[0].id) == 1:
                        held[node.targets[0].id] = kernels[id(value)]
            for node in own:
                if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)):
                    continue
                for side, other in ((node.left, node.right), (node.right, node.left)):
                    attr = raw_weight_attr(side, receiver)
                    if attr not in _WEIGHTS:
                        continue
                    inner = _strip(other)
                    applied = (
                        kernels.get(id(inner))
                        if isinstance(inner, ast.Call)
                        else held.get(inner.id)
                        if isinstance(inner, ast.Name)
                        else None
                    )
                    if applied != attr:
                        continue
                    self.report(
                        node,
                        f"`{receiver}.{attr}` scales the output of a fused RMSNorm kernel that already applied "
                        f"`{receiver}.{attr}`: the result is norm(x) * {attr}**2 on this path; drop the extra "
                        "multiply",
                    )
                    break
