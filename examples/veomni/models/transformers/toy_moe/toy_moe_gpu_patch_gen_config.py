"""
Patch spec for the toy MoE model (GPU).

Regen command:
patchgen veomni.models.transformers.toy_moe.toy_moe_gpu_patch_gen_config -o veomni/models/transformers/toy_moe/generated --diff -v
"""

import torch

from veomni.patchgen.patch_spec import PatchConfig


config = PatchConfig(
    source_module="transformers.models.toy_moe.modeling_toy_moe",
    target_file="patched_modeling_toy_moe_gpu.py",
    description="Toy MoE model with VeOmni patches",
)
# the patched forwards return VeOmni's output class with log-probs; upstream's is not imported
config.add_import("veomni.utils.model_outputs", names=["MoeCausalLMOutputWithLogProbs"])
config.drop_import_names("MoeCausalLMOutputWithPast")


@config.override_method("ToyMoeRouter.forward", description="Top-k routing in float32")
def toy_moe_router_forward_patched(self, hidden_states: torch.Tensor):
    logits = self.gate(hidden_states.float())
    weights, experts = torch.topk(logits.softmax(dim=-1), self.top_k, dim=-1)
    return weights.to(hidden_states.dtype), experts
