"""Eager RMSNorm fallbacks (each carries a planted bug for the RMSNorm formula rules)."""

import torch

from veomni.ops import register_op


def rms_norm_eager(hidden_states, weight, eps):
    x = hidden_states.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x  # NPU407: the fp32 result is never cast back to the input dtype


def rms_norm_eager_shifted_eps(hidden_states, weight, eps):
    x = hidden_states.float()
    x = x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps)  # NPU408: eps added after the root
    return (weight * x).to(hidden_states.dtype)


def rms_norm_eager_variance(hidden_states, weight, eps):
    x = hidden_states.float()
    x = x * torch.rsqrt(x.var(-1, keepdim=True) + eps)  # NPU410: a variance, not the mean of squares
    return (weight * x).to(hidden_states.dtype)


def rms_norm_eager_offset(hidden_states, weight, eps):
    x = hidden_states.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return ((1.0 + weight.float()) * x).to(hidden_states.dtype)


# NPU409: the standard variant's row runs a kernel that adds 1 to the weight
register_op("rms_norm", "standard", "eager", forward=rms_norm_eager_offset, description="eager RMSNorm")
