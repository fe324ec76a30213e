import torch
from torch import nn

from ....ops.dispatch import OpSlot


# the fla import moved into the slot; the name stays so upstream code still resolves
causal_conv1d_fn = None
veomni_causal_conv1d = OpSlot("causal_conv1d", "standard")


class ToyGatedDeltaNet(nn.Module):
    def __init__(self, hidden_size: int):
        super().__init__()
        self.conv = nn.Conv1d(hidden_size, hidden_size, 4, groups=hidden_size, padding=3)
        self.causal_conv1d_fn = causal_conv1d_fn

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if self.causal_conv1d_fn is not None:
            return self.causal_conv1d_fn(hidden_states, self.conv.weight)
        return self.conv(hidden_states.transpose(1, 2)).transpose(1, 2)
