import torch
from torch import nn


class MelFrontend(nn.Module):
    def __init__(self, n_mels: int):
        super().__init__()
        self.register_buffer("filters", torch.ones(n_mels, 201))

    def features(self, wave: torch.Tensor) -> torch.Tensor:
        return self.filters @ wave


def encode(wave: torch.Tensor, encoder: nn.Module) -> torch.Tensor:
    device = next(encoder.parameters()).device
    # NPU111: built on demand on the CPU, never moved, fed the waveform moved to the encoder's device
    frontend = MelFrontend(80)
    return encoder(frontend.features(wave.to(device=device)))
