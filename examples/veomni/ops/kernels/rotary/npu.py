# NPU310: the rotated q/k computed, never returned
import torch_npu


def apply_rotary_npu(q, k, cos, sin):
    q_embed = torch_npu.npu_rotary_mul(q, cos, sin)
    k_embed = torch_npu.npu_rotary_mul(k, cos, sin)
    q_embed, k_embed = q_embed.contiguous(), k_embed.contiguous()
