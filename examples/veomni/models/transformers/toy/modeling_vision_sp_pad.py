"""A vision tower's sequence-parallel padding: the pad becomes its own piece of the packed sequence (NPU733)."""

import torch


def pad_vision_tokens(hidden_states, cu_seqlens, sp_padding_size):
    if sp_padding_size > 0:
        hidden_states = torch.nn.functional.pad(hidden_states, (0, 0, 0, sp_padding_size))
        new_cumsum = cu_seqlens[-1] + sp_padding_size
        # NPU733: keeps [0, total + pad], every image's boundary dropped
        cu_seqlens = torch.cat([cu_seqlens[:1], new_cumsum.unsqueeze(0)], dim=0)
    return hidden_states, cu_seqlens
