"""The toy MoE's experts module."""

from veomni.ops import VeomniOp


class ToyMoeExperts:
    def __init__(self, config):
        # NPU231: the tree registers `moe_experts/toy_moe` for this model; the generic variant is bound
        self.veomni_moe = VeomniOp("moe_experts", "standard", "eager")
