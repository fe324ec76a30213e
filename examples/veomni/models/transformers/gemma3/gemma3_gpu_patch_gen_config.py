"""
Patch spec for Gemma 3 (GPU): a kernel choice read from the ops config and a fused loss.

Regen command:
patchgen veomni.models.transformers.gemma3.gemma3_gpu_patch_gen_config -o veomni/models/transformers/gemma3/generated
"""

import torch

from veomni.patchgen.patch_spec import PatchConfig


config = PatchConfig(
    source_module="transformers.models.gemma3.modeling_gemma3",
    target_file="patched_modeling_gemma3_gpu.py",
    description="Gemma 3 with VeOmni kernel choices",
)

config.add_post_import_block(
    """
    from veomni.ops import VeomniOp
    from veomni.ops.config import resolve_op_impl
    from veomni.ops.dispatch import OpsConfigSlot
    veomni_rms_norm_impl = OpsConfigSlot("rms_norm_implementation")
    """
)


@config.override_method("Gemma3RMSNorm.__init__", description="Build the RMSNorm handle")
def gemma3_rmsnorm_init_patched(self, dim: int, eps: float = 1e-6):
    super().__init__()
    self.eps = eps
    self.weight = torch.nn.Parameter(torch.zeros(dim))
    self.veomni_rms_norm = VeomniOp("rms_norm", "offset", resolve_op_impl("rms_norm_implementation"))


@config.override_method("Gemma3RMSNorm.forward", description="Fused RMSNorm unless the ops config says eager")
def gemma3_rmsnorm_forward_patched(self, x: torch.Tensor) -> torch.Tensor:
    # NPU207: `veomni_rms_norm_impl` is one module-global choice shared by every model in the process
    if veomni_rms_norm_impl.value == "eager":
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return (normed * (1.0 + self.weight.float())).type_as(x)
    # NPU405: Gemma's RMSNorm keeps eps in `self.eps`; `variance_epsilon` is Llama's name
    return self.veomni_rms_norm(x, self.weight, eps=self.variance_epsilon)


@config.override_method(
    "Gemma3ForCausalLM.forward", description="Logits for the kept positions, then the loss"
)
def gemma3_forcausallm_forward_patched(
    self, input_ids=None, attention_mask=None, labels=None, logits_to_keep=0, **kwargs
):
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
