# ======================================================================
# AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
# Source: transformers.models.deepseek_v3.modeling_deepseek_v3
# Based on: transformers==5.9.0
#
# Patches applied:
#   override_method: DeepseekV3TopkRouter.forward - Router logits over the flattened tokens
# ======================================================================

import torch.nn.functional as F
from torch import nn


# ======================================================================
# [MODIFIED CLASS] DeepseekV3TopkRouter
# Methods patched: forward
# ======================================================================
class DeepseekV3TopkRouter(nn.Module):
    def forward(self, hidden_states):
        flat = hidden_states.reshape(-1, self.config.hidden_size)
        # NPU445: upstream projects in float32; in bf16 the sigmoid scores, the group top-k and the expert choice drift
        router_logits = F.linear(flat, self.weight)
        return router_logits
