"""Plain (non-generated) model code of the toy model, half-migrated to VeomniOp handles, with the mistakes
npu-lint's dispatch (NPU202-205) and RMSNorm-semantics (NPU401/402/407) rules catch."""

import torch
from torch import nn

from veomni.ops import VeomniOp
from veomni.ops.config import resolve_op_impl


class ToyGemmaRMSNorm(nn.Module):
    """Gemma-style: weight starts at zeros, output norm(x) * (1 + weight)."""

    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(hidden_size))
        # NPU402: a zero-initialised weight needs the "offset" variant
        self.veomni_rms_norm = VeomniOp("rms_norm", "standard", resolve_op_impl("rms_norm_implementation"))

    def forward(self, hidden_states):
        return self.veomni_rms_norm(hidden_states, self.weight, eps=self.eps)


class ToyQwenNextRMSNorm(nn.Module):
    """Offset variant, but the caller still adds the 1 (NPU401)."""

    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(hidden_size))
        self.veomni_rms_norm = VeomniOp("rms_norm", "offset", resolve_op_impl("rms_norm_implementation"))

    def forward(self, hidden_states):
        return self.veomni_rms_norm(hidden_states, 1.0 + self.weight.float(), eps=self.eps)


class ToyVisionNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.variance_epsilon = eps
        self.weight = nn.Parameter(torch.ones(hidden_size))
        # NPU205: the OpSlot variant name; VeomniOp calls it "offset"
        self.veomni_rms_norm = VeomniOp("rms_norm", "qwen3_5", resolve_op_impl("rms_norm_implementation"))

    def forward(self, hidden_states):
        return self.veomni_rms_norm(hidden_states, self.weight, eps=self.variance_epsilon)


class ToyMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.impl = config.ops_config.swiglu_mlp_implementation
        # NPU204: a literal implementation pins a GPU kernel on every device
        self.veomni_swiglu = VeomniOp("swiglu_mlp", "standard", "liger_kernel")

    def forward(self, x):
        # NPU203: guarded call with an eager copy as fallback
        if self.impl != "eager":
            return self.veomni_swiglu(
                x, self.gate_proj.weight, None, self.up_proj.weight, None, self.down_proj.weight, None
            )
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


def toy_apply_rotary(q, k, cos, sin):
    # NPU202: a handle built on every call; NPU204: the rms_norm field for a rope op
    rope = VeomniOp("rope", "full", resolve_op_impl("rms_norm_implementation"))
    return rope(q, k, cos, sin)


class ToyAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.qkv = nn.Linear(config.hidden_size, 3 * config.hidden_size)

    def forward(self, hidden_states, cos, sin):
        q, k, v = self.qkv(hidden_states).chunk(3, dim=-1)
        q, k = toy_apply_rotary(q, k, cos, sin)
        return q @ k.transpose(-1, -2) @ v


class ToyQKRMSNorm(nn.Module):
    """Eager per-head norm of the attention's queries and keys (no registry op behind it)."""

    def __init__(self, head_dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(head_dim))

    def forward(self, states):
        states32 = states.float()
        scale = torch.rsqrt(states32.pow(2).mean(-1, keepdim=True) + self.eps)
        # NPU407: the fp32 product goes to the bf16 attention as is; `.to(states.dtype)` is missing
        return self.weight * (states32 * scale)
