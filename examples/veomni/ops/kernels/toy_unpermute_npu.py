"""Ascend adapters of this demo tree: MoE token unpermute and a full RoPE forward."""

import torch_npu
from torch import Tensor


def toy_unpermute(output, row_ids_map, routing_weights):
    return torch_npu.npu_moe_token_unpermute(output, row_ids_map, probs=routing_weights)


def toy_unpermute_shared(output, row_ids_map, routing_weights):
    # NPU311: the routing weights every other unpermute passes are dropped
    return torch_npu.npu_moe_token_unpermute(output, row_ids_map)


def toy_rope_forward(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor, unsqueeze_dim: int = 1) -> tuple[tuple[Tensor, Tensor], tuple]:
    cos_u = cos.unsqueeze(unsqueeze_dim)
    sin_u = sin.unsqueeze(unsqueeze_dim)
    # NPU312: cos/sin were unsqueezed for the kernel, but the originals are passed
    q_embed = torch_npu.npu_rotary_mul(q, cos, sin)
    k_embed = torch_npu.npu_rotary_mul(k, cos, sin)
    # NPU313: (q, k) returned where the annotation promises ((q, k), saved state)
    return q_embed, k_embed


def toy_rope_apply_npu(x, cos, sin, head_dim):
    from einops import rearrange

    x = rearrange(x, "b s (n d) -> b s n d", d=head_dim)
    x_out = torch_npu.npu_rotary_mul(x, cos, sin, rotary_mode="interleave")
    # NPU314: the per-head output is returned where the fused [b, s, n*d] layout came in
    return x_out.to(x.dtype)


def toy_rope_twins(q, k, cos, sin):
    q_embed = torch_npu.npu_rotary_mul(q, cos, sin)
    # NPU315: the key is rotated in interleaved pairs, the query (same cos/sin) by halves
    k_embed = torch_npu.npu_rotary_mul(k, cos, sin, rotary_mode="interleave")
    return q_embed, k_embed


def eager_toy_score(logits, labels, ignore_index=-100):
    return (logits.float() - labels.float()).mean()


# NPU316: the NPU backend takes labels and logits in the other order than the eager one
def npu_toy_score(labels, logits, ignore_index=-100):
    return (logits.float() - labels.float()).mean()
