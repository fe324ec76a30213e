"""
Patch spec for DeepSeek-V3 (GPU): the MoE router's projection over the flattened tokens.

Regen command:
patchgen veomni.models.transformers.deepseek_v3.deepseek_v3_gpu_patch_gen_config -o veomni/models/transformers/deepseek_v3/generated
"""

import torch.nn.functional as F

from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(
    source_module="transformers.models.deepseek_v3.modeling_deepseek_v3",
    target_file="patched_modeling_deepseek_v3_gpu.py",
    description="DeepSeek-V3 with VeOmni's router projection",
)


@config.override_method("DeepseekV3TopkRouter.forward", description="Router logits over the flattened tokens")
def deepseek_v3_topk_router_forward_patched(self, hidden_states):
    flat = hidden_states.reshape(-1, self.config.hidden_size)
    # NPU445: upstream projects in float32; in bf16 the sigmoid scores, the group top-k and the expert choice drift
    router_logits = F.linear(flat, self.weight)
    return router_logits
