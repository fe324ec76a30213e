# NPU305: planted example (see examples/README.md)
import torch
from torch import nn


class ToyRotaryEmbedding(nn.Module):
    def forward(self, x, position_ids):
        from veomni.models.transformers.toy.cuda_outer import cuda_outer

        freqs = cuda_outer(self.inv_freq.float(), position_ids.float())
        return freqs.cos(), freqs.sin()
