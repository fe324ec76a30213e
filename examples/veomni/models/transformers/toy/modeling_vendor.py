"""Plain (non-generated) toy model code that calls vendor kernels directly (NPU301 / NPU302 demo)."""

import torch
import torch_npu
from torch import nn

from veomni.utils.import_utils import is_package_available

try:
    from liger_kernel.transformers.rope import liger_rotary_pos_emb
except ImportError:
    liger_rotary_pos_emb = None

if is_package_available("flash_attn"):
    from flash_attn import flash_attn_func


class ToyFusedRMSNorm(nn.Module):
    """Standard RMSNorm (weight initialised to ones) that always runs the Ascend kernel."""

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return torch_npu.npu_rms_norm(hidden_states, self.weight, epsilon=self.variance_epsilon)[0]


def toy_apply_rotary(q, k, cos, sin, unsqueeze_dim=1):
    return liger_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)


def toy_attention(query, key, value, causal=True):
    return flash_attn_func(query, key, value, causal=causal)


class ToyDispatchedRMSNorm(nn.Module):
    """A weighted RMSNorm with a fused-kernel branch and an eager branch."""

    def __init__(self, hidden_size: int, eps: float = 1e-6, fused_rms_norm=None):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps
        self.fused_rms_norm = fused_rms_norm

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if self.fused_rms_norm is not None:
            # NPU433: the kernel branch drops the learned weight the eager branch applies
            return self.fused_rms_norm(hidden_states, None, self.variance_epsilon)
        variance = hidden_states.float().pow(2).mean(-1, keepdim=True)
        normed = hidden_states.float() * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * normed.to(hidden_states.dtype)


def toy_rms_norm_forward_npu(self, hidden_states: torch.Tensor) -> torch.Tensor:
    normed = torch_npu.npu_rms_norm(hidden_states, self.weight, epsilon=self.variance_epsilon)[0]
    # NPU451: the kernel already applied the weight; the eager path's multiply was kept, so it applies twice
    return self.weight * normed.to(hidden_states.dtype)
