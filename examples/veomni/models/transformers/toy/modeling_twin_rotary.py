# NPU468: the keys' rotary embedding reads the queries (the query line copied, one name left unswapped).
import torch


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(q, k, cos, sin):
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (q * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed
