"""
Patch spec for Llama (GPU, OpSlot generation): a fused RMSNorm and a fused loss, ported in a hurry.

Regen command:
patchgen veomni.models.transformers.llama.llama_gpu_patch_gen_config -o veomni/models/transformers/llama/generated
"""

import torch
from torch import nn
from transformers.loss.loss_utils import ForCausalLMLoss

from veomni.patchgen.patch_spec import PatchConfig, create_patch_from_external


config = PatchConfig(
    source_module="transformers.models.llama.modeling_llama",
    target_file="patched_modeling_llama_gpu.py",
    description="Llama with OpSlot-based GPU kernel replacements",
)

config.add_post_import_block(
    """
    from veomni.ops.dispatch import OpSlot
    veomni_rms_norm = OpSlot("rms_norm", "standard")
    """
)

# NPU303: the MLP class swapped for a Liger class named by strings (no Ascend build of Liger)
config.patches.append(
    create_patch_from_external(
        target="LlamaMLP",
        replacement_module="liger_kernel.transformers.swiglu",
        replacement_name="LigerSwiGLUMLP",
    )
)


@config.override_method("LlamaRMSNorm.forward", description="OpSlot guard for the fused RMSNorm")
def llama_rmsnorm_forward_patched(self, hidden_states: torch.Tensor) -> torch.Tensor:
    # NPU105: `.is_cuda` is False on Ascend, so the NPU kernel never runs
    if veomni_rms_norm.use_non_eager_impl and hidden_states.is_cuda:
        # NPU404: `1 + weight` (Gemma's formula) on a norm whose weight starts at ones
        return veomni_rms_norm(hidden_states, 1.0 + self.weight, self.variance_epsilon)
    # NPU406: the eager path squares bf16 activations; upstream upcasts to fp32 first
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    normed = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
    return self.weight * normed


@config.override_method("LlamaForCausalLM.forward", description="Loss on the last positions only")
def llama_forcausallm_forward_patched(self, input_ids=None, attention_mask=None, labels=None, **kwargs):
    # NPU414: `logits_to_keep` is gone from the signature, so the full [batch, seq, vocab] logits are built
    outputs = self.model(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
    logits = self.lm_head(outputs.last_hidden_state)
    loss = None
    if labels is not None:
        # NPU412: shifted here, and shifted again inside loss_function
        shifted = labels[..., 1:].contiguous()
        loss = self.loss_function(logits=logits, labels=shifted, vocab_size=self.config.vocab_size, **kwargs)
    return loss, logits


@config.override_method("LlamaForSequenceClassification.__init__", description="Bind the head's loss once")
def llama_seq_cls_init_patched(self, config):
    nn.Module.__init__(self)
    self.config = config
    self.num_labels = config.num_labels
    self.score = nn.Linear(config.hidden_size, config.num_labels, bias=False)
    # NPU419: the causal-LM loss shifts the labels by one; a classification head has one label per position
    self.loss_function = ForCausalLMLoss
