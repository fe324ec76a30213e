# NPU730: planted example (see examples/README.md)
from torch import nn


class ToyProjectorEncoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.merger = nn.Linear(config.hidden_size, config.out_hidden_size)
        self.projector = nn.Linear(config.out_hidden_size, config.output_size)  # NPU730: never applied

    def set_projector_trainable_only(self):
        self.requires_grad_(False)
        self.projector.requires_grad_(True)

    def lm_encode(self, features, **kwargs):
        return self.merger(features)
