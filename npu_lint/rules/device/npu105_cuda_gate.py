"""NPU105 cuda-gate."""

from __future__ import annotations

import ast

from npu_lint.core.diagnostics import Applicability
from npu_lint.rules.base import Context, Example, Rule, make_fix
from npu_lint.rules.device._shared import (
    bool_operand_removal,
    cuda_gate_on_npu_path,
    cuda_presence_probe,
    cuda_string,
    device_neutral_scope,
    in_fstring,
    npu_module,
)


def _device_like(node: ast.AST) -> bool:
    """`x.device.type`, `x.device`, `device_type`, `str(x.device)`, `x.device.type.lower()`."""
    while (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("lower", "strip")
    ):
        node = node.func.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "str" and node.args:
        node = node.args[0]
    if isinstance(node, ast.Attribute):
        return node.attr in ("type", "device", "device_type")
    return isinstance(node, ast.Name) and "device" in node.id


def _cuda_member(node: ast.AST) -> bool:
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(cuda_string(e) for e in node.elts)


def _cuda_compare(node: ast.Compare) -> bool:
    """`<device> == "cuda"`, `<device> in ("cuda", ...)`, `"cuda" in str(<device>)` (negations included)."""
    left, right, op = node.left, node.comparators[0], node.ops[0]
    if isinstance(op, (ast.Eq, ast.NotEq)):
        side = left if cuda_string(right) else right if cuda_string(left) else None
        return side is not None and _device_like(side)
    if isinstance(op, (ast.In, ast.NotIn)):
        if _cuda_member(right):
            return _device_like(left)
        return cuda_string(left) is not None and _device_like(right)
    return False


class CudaGate(Rule):
    code = "NPU105"
    name = "cuda-gate"
    summary = (
        'A CUDA test (`.is_cuda`, `device.type == "cuda"`, `device.type in ("cuda", ...)`, '
        "`torch.cuda.is_available()`) guards a dispatch handle or an NPU code path."
    )
    why = (
        '`x.is_cuda` and `x.device.type == "cuda"` are False for Ascend tensors. Added to a generic dispatch '
        "guard (`if slot.use_non_eager_impl and x.is_cuda:`), to the branch that calls a registry handle (a "
        "module-global one, or one the instance owns: `self.veomni_x = VeomniOp(...)` or a callable bound to it), or "
        "to any condition in an NPU module or spec, they switch the NPU kernel off: the eager fallback runs "
        "silently, every step, on the hardware the kernel was bound for. The registry already picks the "
        "kernel per device, so the guard needs no device test. A CUDA test that sits next to a CUDA-only "
        'implementation name (`impl == "triton"`, `"tilelang"`, `use_flash_attn`...) or inside a branch '
        "or function that selects one guards a CUDA kernel on purpose and is not reported (NPU102 reports "
        "other device-type branches)."
    )
    bad = (
        Example(
            """
            import torch
            from torch import nn
            from veomni.ops.dispatch import OpSlot

            veomni_rms_norm = OpSlot("rms_norm", "standard")


            class ToyRMSNorm(nn.Module):
                def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
                    if veomni_rms_norm.use_non_eager_impl and hidden_states.is_cuda:
                        return veomni_rms_norm(hidden_states, self.weight, self.eps)
                    variance = hidden_states.pow(2).mean(-1, keepdim=True)
                    return self.weight * hidden_states * torch.rsqrt(variance + self.eps)
            """,
            fixed="""
            import torch
            from torch import nn
            from veomni.ops.dispatch import OpSlot

            veomni_rms_norm = OpSlot("rms_norm", "standard")


            class ToyRMSNorm(nn.Module):
                def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
                    if veomni_rms_norm.use_non_eager_impl:
                        return veomni_rms_norm(hidden_states, self.weight, self.eps)
                    variance = hidden_states.pow(2).mean(-1, keepdim=True)
                    return self.weight * hidden_states * torch.rsqrt(variance + self.eps)
            """,
            title="a CUDA test added to a generic non-eager guard (unsafe fix: drop it)",
        ),
        Example(
            """
            import torch


            def apply_rope(q, cos, sin, rope_kernel):
                if q.device.type == "cuda":
                    return rope_kernel(q, cos, sin)
                return q * cos
            """,
            path="veomni/models/transformers/toy/generated/patched_modeling_toy_npu.py",
            title="any device-type gate in an NPU module",
        ),
        Example(
            """
            import torch
            from veomni.ops.dispatch import OpSlot

            veomni_rope = OpSlot("rotary_pos_emb", "full")


            def apply_rope(q, k, cos, sin):
                if veomni_rope.use_non_eager_impl and q.device.type in ("cuda", "xpu"):
                    return veomni_rope(q, k, cos, sin)
                return q * cos, k * cos
            """,
            fixed="""
            import torch
            from veomni.ops.dispatch import OpSlot

            veomni_rope = OpSlot("rotary_pos_emb", "full")


            def apply_rope(q, k, cos, sin):
                if veomni_rope.use_non_eager_impl:
                    return veomni_rope(q, k, cos, sin)
                return q * cos, k * cos
            """,
            title="a device-type membership test in a dispatch guard",
        ),
        Example(
            """
            from torch import nn
            from veomni.ops import VeomniOp


            class ToyGatedMLP(nn.Module):
                def __init__(self, config):
                    super().__init__()
                    self.veomni_gated_mlp = VeomniOp("swiglu_mlp", "standard", config.ops_config.swiglu_mlp_implementation)

                def forward(self, x):
                    if x.is_cuda:
                        return self.veomni_gated_mlp(x, self.gate_w, None, self.up_w, None, self.down_w, None)
                    return self.down(self.act(self.gate(x)) * self.up(x))
            """,
            title="a CUDA test around the call of a handle the instance owns",
        ),
        Example(
            """
            from . import reference


            def fused_swiglu(gate, up):
                if not gate.is_cuda or gate.numel() == 0:
                    return reference.swiglu(gate, up)
                import torch_npu

                return torch_npu.npu_swiglu(torch.cat([gate, up], dim=-1))
            """,
            path="veomni/ops/kernels/swiglu/npu_fused.py",
            title="an NPU kernel adapter (an ops module named for the NPU) that falls back unless the input is CUDA",
        ),
        Example(
            """
            import torch


            class ToyRotary(torch.nn.Module):
                def forward(self, x, cos, sin):
                    if x.device.type != "cuda":
                        return x * cos + self.rotate(x) * sin
                    import torch_npu

                    return torch_npu.npu_rotary_mul(x, cos, sin)
            """,
            title="a CUDA test in a function that calls a torch_npu kernel",
        ),
        Example(
            """
            from veomni.utils.device import IS_NPU_AVAILABLE


            def host_seqlens(cu_seqlens):
                if IS_NPU_AVAILABLE and cu_seqlens.device.type == "cuda":
                    cu_seqlens = cu_seqlens.cpu()
                return cu_seqlens
            """,
            fixed="""
            from veomni.utils.device import IS_NPU_AVAILABLE


            def host_seqlens(cu_seqlens):
                if IS_NPU_AVAILABLE:
                    cu_seqlens = cu_seqlens.cpu()
                return cu_seqlens
            """,
            path="veomni/models/transformers/toy/modeling_toy.py",
            title="a CUDA test conjoined with an NPU guard: the NPU branch can never run",
        ),
        Example(
            """
            import torch
            from veomni.ops.dispatch import OpSlot

            veomni_rms_norm = OpSlot("rms_norm", "standard")


            def rms_norm(x, weight, eps):
                if veomni_rms_norm.use_non_eager_impl and torch.cuda.is_available():
                    return veomni_rms_norm(x, weight, eps)
                return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
            """,
            fixed="""
            import torch
            from veomni.ops.dispatch import OpSlot

            veomni_rms_norm = OpSlot("rms_norm", "standard")


            def rms_norm(x, weight, eps):
                if veomni_rms_norm.use_non_eager_impl:
                    return veomni_rms_norm(x, weight, eps)
                return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
            """,
            title="a CUDA-presence probe (`torch.cuda.is_available()`) in a dispatch guard",
        ),
    )
    good = (
        Example(
            """
            import torch


            def select(hidden_states: torch.Tensor, impl: str, slot):
                use_tilelang = impl == "tilelang" and hidden_states.is_cuda
                if slot.use_non_eager_impl and impl == "triton" and hidden_states.is_cuda:
                    return slot(hidden_states)
                return use_tilelang
            """
        ),
    )
    fix_safety = (
        "Unsafe, offered when the CUDA test is an operand of an `and`: the test is removed. It is unsafe because "
        "the guarded kernel might really be CUDA-only under a generic name; check that the bound kernel has an "
        "NPU row. No fix otherwise."
    )
    requires = ("cuda",)  # `.is_cuda`, a comparison with a "cuda" device type, `torch.cuda.is_available()`
    node_types = (ast.Attribute, ast.Compare, ast.Call)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        """Model code, and the NPU adapters among kernel code (``veomni/ops/.../npu*.py``)."""
        kind = ctx.source.kind
        return not kind.test and (kind.model_code or npu_module(ctx.source.path) or device_neutral_scope(ctx))

    def visit(self, node: ast.AST) -> None:
        ctx = self.ctx
        if isinstance(node, ast.Attribute):
            if node.attr != "is_cuda" or not isinstance(node.ctx, ast.Load):
                return
        elif isinstance(node, ast.Call):
            if not cuda_presence_probe(ctx, node):
                return
        else:
            assert isinstance(node, ast.Compare)
            if len(node.comparators) != 1 or not _cuda_compare(node):
                return
        if in_fstring(ctx):
            return
        what = cuda_gate_on_npu_path(ctx, node)
        if what is None:
            return
        test = ctx.source.segment(node)
        fix = None
        edit = bool_operand_removal(ctx, node)
        if edit is not None:
            fix = make_fix(
                f"Remove `{test}` from the condition",
                [edit],
                Applicability.UNSAFE,
                "the guarded kernel may be CUDA-only under a generic name: check that it has an NPU row",
            )
        self.report(
            node,
            f"`{test}` is False on an Ascend NPU, so the condition around {what} switches the NPU path off; "
            "drop the CUDA test (the registry picks the kernel per device) or test a CUDA-only implementation "
            "name",
            fix,
        )
