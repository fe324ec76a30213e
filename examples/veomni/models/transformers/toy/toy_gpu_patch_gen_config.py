"""
Patch spec for the toy model (GPU, OpSlot generation).

Regen command:
patchgen veomni.models.transformers.toy.toy_gpu_patch_gen_config -o veomni/models/transformers/toy/generated
"""

import torch
from transformers.integrations.hub_kernels import use_kernel_forward_from_hub

from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(
    source_module="transformers.models.toy.modeling_toy",
    target_file="patched_modeling_toy_gpu.py",
    description="Toy model with OpSlot-based GPU kernel replacements",
)

config.add_import("torch_npu")

config.add_post_import_block(
    """
    from veomni.ops.dispatch import OpSlot
    veomni_rms_norm = OpSlot("rms_norm", "standard")
    veomni_apply_rotary_pos_emb = OpSlot("rotary_pos_emb", "full")
    """
)


@config.override_method("ToyRMSNorm.forward", description="OpSlot guard for the fused RMSNorm")
def toy_rmsnorm_forward_patched(self, hidden_states: torch.Tensor) -> torch.Tensor:
    if veomni_rms_norm.use_non_eager_impl:
        return veomni_rms_norm(hidden_states, self.weight, self.variance_epsilon)
    input_dtype = hidden_states.dtype
    hidden_states = hidden_states.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
    return self.weight * hidden_states.to(input_dtype)


@config.replace_function("apply_rotary_pos_emb", description="OpSlot guard for the fused RoPE")
def apply_rotary_pos_emb_patched(q, k, cos, sin, unsqueeze_dim=1):
    if veomni_apply_rotary_pos_emb.use_non_eager_impl:
        return veomni_apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


@config.override_method("ToyModel.forward", description="Build a causal mask on the accelerator")
def toy_model_forward_patched(self, input_ids: torch.LongTensor, attention_mask=None):
    hidden_states = self.embed_tokens(input_ids)
    seq_len = input_ids.shape[1]
    causal = torch.ones(seq_len, seq_len).tril().cuda()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    for layer in self.layers:
        hidden_states = layer(hidden_states, causal)
    return self.norm(hidden_states)


# NPU304: the kernels hub maps FastGELU for CUDA only; GPU runs may execute the hub kernel, NPU runs this code
@config.replace_function("toy_gelu", description="tanh GELU")
@use_kernel_forward_from_hub("FastGELU")
def toy_gelu_patched(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.tanh(0.7978845608 * (x + 0.044715 * x**3)))
