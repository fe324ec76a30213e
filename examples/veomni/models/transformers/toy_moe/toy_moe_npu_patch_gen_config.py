"""
Patch spec for the toy MoE model (Ascend NPU), written before npu-lint: it copies the GPU patch.

Regen command:
patchgen veomni.models.transformers.toy_moe.toy_moe_npu_patch_gen_config -o veomni/models/transformers/toy_moe/generated --diff -v
"""

import torch

from veomni.models.transformers.toy_moe.toy_moe_gpu_patch_gen_config import config as gpu_config
from veomni.patchgen.patch_spec import PatchConfig


config = PatchConfig(
    source_module="transformers.models.toy_moe.modeling_toy_moe",
    target_file="patched_modeling_toy_moe_npu.py",
    description="Toy MoE model for Ascend NPU",
)
config.additional_imports.extend(gpu_config.additional_imports)
config.helpers.extend(gpu_config.helpers)


@config.override_method("ToyMoeRouter.forward", description="Top-k routing in float32")
def toy_moe_router_forward_npu(self, hidden_states: torch.Tensor):
    logits = self.gate(hidden_states.float())
    weights, experts = torch.topk(logits.softmax(dim=-1), self.top_k, dim=-1)
    return weights.to(hidden_states.dtype), experts
