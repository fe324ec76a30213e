# ======================================================================
# AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
# Source: transformers.models.qwen3_moe.modeling_qwen3_moe
# Based on: transformers==5.9.0
#
# Patches applied:
#   override_method: Qwen3MoeTopKRouter.forward - Routing scores in float32
# ======================================================================

import torch
from torch import nn


# ======================================================================
# [MODIFIED CLASS] Qwen3MoeTopKRouter
# Methods patched: forward
# ======================================================================
class Qwen3MoeTopKRouter(nn.Module):
    def forward(self, hidden_states):
        flat = hidden_states.reshape(-1, self.hidden_dim)
        router_logits = torch.nn.functional.linear(flat, self.weight)
        # NPU417: upstream returns the raw logits; the load-balancing loss applies its own softmax to them
        router_logits = torch.softmax(router_logits.float(), dim=-1)
        routing_weights, selected_experts = torch.topk(router_logits, self.top_k, dim=-1)
        if self.norm_topk_prob:
            routing_weights = routing_weights / routing_weights.sum(dim=-1, keepdim=True)
        return router_logits, routing_weights.to(flat.dtype), selected_experts
