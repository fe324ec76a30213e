# ======================================================================
# AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
# Source: transformers.models.gemma3.modeling_gemma3
# Based on: transformers==5.9.0
#
# Patches applied:
#   override_method: Gemma3RMSNorm.__init__ - Build the RMSNorm handle
#   override_method: Gemma3RMSNorm.forward - Fused RMSNorm unless the ops config says eager
#   override_method: Gemma3ForCausalLM.forward - Logits for the kept positions, then the loss
# ======================================================================

import torch
from torch import nn

# ======================================================================
# Additional import blocks for patches
# ======================================================================
from veomni.ops import VeomniOp
from veomni.ops.config import resolve_op_impl
from veomni.ops.dispatch import OpsConfigSlot

veomni_rms_norm_impl = OpsConfigSlot("rms_norm_implementation")


# ======================================================================
# [MODIFIED CLASS] Gemma3RMSNorm
# Methods patched: __init__, forward
# ======================================================================
class Gemma3RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.zeros(dim))
        self.veomni_rms_norm = VeomniOp("rms_norm", "offset", resolve_op_impl("rms_norm_implementation"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # NPU207: `veomni_rms_norm_impl` is one module-global choice shared by every model in the process
        if veomni_rms_norm_impl.value == "eager":
            normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
            return (normed * (1.0 + self.weight.float())).type_as(x)
        # NPU405: Gemma's RMSNorm keeps eps in `self.eps`; `variance_epsilon` is Llama's name
        return self.veomni_rms_norm(x, self.weight, eps=self.variance_epsilon)


# ======================================================================
# [MODIFIED CLASS] Gemma3ForCausalLM
# Methods patched: forward
# ======================================================================
class Gemma3ForCausalLM(nn.Module):
    def forward(self, input_ids=None, attention_mask=None, labels=None, logits_to_keep=0, **kwargs):
        outputs = self.model(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        slice_indices = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        # NPU411: upstream caps the logits with `config.final_logit_softcapping` here; this patch forgot it
        logits = self.lm_head(outputs.last_hidden_state[:, slice_indices, :])
        loss = None
        if labels is not None:
            # NPU413: `**kwargs` (num_items_in_batch, ignore_index) no longer reach the loss
            # NPU416: the loss's own view of the logits (flattened, fp32) replaces the model's output
            loss, logits = self.loss_function(logits, labels, self.vocab_size)
        return loss, logits
