"""Reference RMSNorm: the eager row every device falls back to when no fused kernel is bound."""

import torch


def eager_rms_norm(hidden_states, weight, eps=1e-6):
    input_dtype = hidden_states.dtype
    h = hidden_states.to(torch.float32)
    root = h.pow(2).mean(-1, keepdim=True).sqrt()
    # NPU408: eps belongs under the root (`rsqrt(mean + eps)`), as in the fused kernels
    h = h / (root + eps)
    return weight * h.to(input_dtype)
