# ======================================================================
# AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
# Source: transformers.models.toy_moe.modeling_toy_moe
# Based on: transformers==5.8.0
#
# Patches applied:
#   override_method: ToyMoeRouter.forward - Top-k routing in float32
# ======================================================================

import torch
from torch import nn


# ======================================================================
# [MODIFIED CLASS] ToyMoeRouter
# Methods patched: forward
# ======================================================================
class ToyMoeRouter(nn.Module):
    def __init__(self, hidden_size, num_experts, top_k):
        super().__init__()
        self.gate = nn.Linear(hidden_size, num_experts, bias=False)
        self.top_k = top_k

    def forward(self, hidden_states: torch.Tensor):
        logits = self.gate(hidden_states.float())
        logits = logits.clamp(-30.0, 30.0)  # hand edit: lost at the next regeneration
        weights, experts = torch.topk(logits.softmax(dim=-1), self.top_k, dim=-1)
        return weights.to(hidden_states.dtype), experts


class ToyMoeForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.router = ToyMoeRouter(config.hidden_size, config.num_experts, config.top_k)
