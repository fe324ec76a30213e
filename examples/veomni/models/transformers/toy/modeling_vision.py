"""A toy vision tower whose fake input for text-only ranks takes `self.dtype`, and the RMSNorm of its patch
merger."""

import torch
from torch import nn


class ToyMergerRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size))

    def forward(self, patches):
        input_dtype = patches.dtype
        patches = patches.float()
        # NPU410: `var` subtracts the row mean (a LayerNorm statistic); RMSNorm takes `pow(2).mean(-1, keepdim=True)`
        spread = patches.var(-1, keepdim=True)
        patches = patches * torch.rsqrt(spread + self.eps)
        return self.weight * patches.to(input_dtype)


class ToyVisionTower(nn.Module):
    # loaded in bf16, the position table stays in float32 (transformers' keep-in-fp32 list)
    _keep_in_fp32_modules_strict = ["pos_embed"]

    def __init__(self, config):
        super().__init__()
        self.pos_embed = nn.Embedding(config.num_positions, config.hidden_size)
        self.patch_embed = nn.Linear(config.patch_dim, config.hidden_size)
        self.patch_dim = config.patch_dim

    def forward(self, pixel_values):
        hidden_states = self.patch_embed(pixel_values)
        return hidden_states + self.pos_embed.weight[: hidden_states.shape[0]]

    def dummy_forward(self):
        # NPU702: `self.dtype` is the dtype of the first parameter (pos_embed, float32); patch_embed is bf16
        pixel_values = torch.zeros((4, self.patch_dim), dtype=self.dtype, device=self.device)
        return self(pixel_values)
