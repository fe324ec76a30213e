"""Two attention paths of the toy text encoder: portable SDPA and an xFormers variant kept from a GPU code base."""

import torch


class ToyTextAttention(torch.nn.Module):
    def sdpa_forward(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    def xformers_forward(self, q, k, v):
        import xformers.ops as xops  # noqa: NPU301 - the dormant vendor path itself

        return xops.memory_efficient_attention(q, k, v)  # noqa: NPU302

    def forward(self, q, k, v, attn_mask=None):
        if attn_mask is None:
            return self.xformers_forward(q, k, v)  # NPU306: the maskless path now needs xFormers
        return self.sdpa_forward(q, k, v)
