# ======================================================================
# AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
# Source: transformers.models.toy.modeling_toy
# Based on: transformers==5.9.0
#
# Patches applied:
#   override_method: ToyRMSNorm.forward - OpSlot guard for the fused RMSNorm
#   replace_function: apply_rotary_pos_emb - OpSlot guard for the fused RoPE
#   override_method: ToyModel.forward - Build a causal mask on the accelerator
# ======================================================================

import torch
from torch import nn

# ======================================================================
# Additional imports for patches
# ======================================================================
import torch_npu

# ======================================================================
# Additional import blocks for patches
# ======================================================================
from veomni.ops.dispatch import OpSlot

veomni_rms_norm = OpSlot("rms_norm", "standard")
veomni_apply_rotary_pos_emb = OpSlot("rotary_pos_emb", "full")


# ======================================================================
# [MODIFIED CLASS] ToyRMSNorm
# Methods patched: forward
# ======================================================================
class ToyRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if veomni_rms_norm.use_non_eager_impl:
            return veomni_rms_norm(hidden_states, self.weight, self.variance_epsilon)
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


# ======================================================================
# [PATCHED FUNCTION] apply_rotary_pos_emb
# ======================================================================
def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    if veomni_apply_rotary_pos_emb.use_non_eager_impl:
        return veomni_apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


class ToyDecoderLayer(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.proj = nn.Linear(hidden_size, hidden_size)

    def forward(self, hidden_states, mask):
        return self.proj(hidden_states)


# ======================================================================
# [MODIFIED CLASS] ToyModel
# Methods patched: forward
# ======================================================================
class ToyModel(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([ToyDecoderLayer(config.hidden_size) for _ in range(2)])
        self.norm = ToyRMSNorm(config.hidden_size)

    def forward(self, input_ids: torch.LongTensor, attention_mask=None):
        hidden_states = self.embed_tokens(input_ids)
        seq_len = input_ids.shape[1]
        causal = torch.ones(seq_len, seq_len).tril().cuda()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        for layer in self.layers:
            hidden_states = layer(hidden_states, causal)
        return self.norm(hidden_states)


class ToyForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.model = ToyModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids, labels=None):
        return self.lm_head(self.model(input_ids))


class ToyForConditionalGeneration(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.language_model = ToyForCausalLM(config)

    def forward(self, input_ids, pixel_values=None, labels=None):
        return self.language_model(input_ids, labels)


__all__ = ["ToyForCausalLM", "ToyForConditionalGeneration", "ToyModel"]
