import torch


def chunk_fwd_o(q, k, v, h, g, scale):
    return torch.ops.veomni_gdr.chunk_fwd_o(q, k, v, h, g, scale)
