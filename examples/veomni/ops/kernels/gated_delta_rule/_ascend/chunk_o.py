import torch
import torch_npu


def chunk_fwd_o(q, k, v, h, g, scale):
    return torch.ops.npu.npu_chunk_fwd_o(q, k, v, h, g, scale=scale)
