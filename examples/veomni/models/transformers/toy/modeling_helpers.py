"""Plain (non-generated) model helpers of the toy model, written the CUDA-only way."""

import torch
from torch import nn


class ToyScaledEmbedding(nn.Module):
    def __init__(self, vocab_size: int, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(vocab_size, dim))
        self.scale = dim**0.5

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        scale = torch.tensor(self.scale).cuda()
        return nn.functional.embedding(input_ids, self.weight) * scale


def build_position_ids(hidden_states: torch.Tensor, seq_len: int) -> torch.Tensor:
    positions = torch.arange(seq_len)
    return positions.cuda(non_blocking=True).expand(hidden_states.shape[0], -1)


def move_model(model: nn.Module) -> nn.Module:
    return model.cuda()
