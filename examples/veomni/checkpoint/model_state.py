"""A DCP Stateful wrapping the model (planted bug: NPU635 the load unwraps a key the save no longer writes)."""

from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
from torch.distributed.checkpoint.stateful import Stateful


class ToyModelState(Stateful):
    def __init__(self, model):
        self.model = model

    def state_dict(self):
        return get_model_state_dict(model=self.model)

    def load_state_dict(self, state_dict):
        # NPU635: the save returns the flat model state dict; there is no "model" key to resume from
        set_model_state_dict(model=self.model, model_state_dict=state_dict["model"])
