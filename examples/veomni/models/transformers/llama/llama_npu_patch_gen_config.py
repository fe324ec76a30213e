"""
Patch spec for Llama (Ascend NPU): re-registers the GPU spec's patches one by one.

Regen command:
patchgen veomni.models.transformers.llama.llama_npu_patch_gen_config -o veomni/models/transformers/llama/generated
"""

from veomni.models.transformers.llama.llama_gpu_patch_gen_config import (
    llama_forcausallm_forward_patched,
    llama_rmsnorm_forward_patched,
    llama_seq_cls_init_patched,
)
from veomni.models_kernel.utils.op_utils import resolve_op_impl
from veomni.ops import VeomniOp
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(
    source_module="transformers.models.llama.modeling_llama",
    target_file="patched_modeling_llama_npu.py",
    description="Llama for Ascend NPU",
)

# NPU208: once the GPU spec's OpSlot is migrated to a handle built in `LlamaRMSNorm.__init__`, this forward
# calls `self.veomni_rms_norm` that nothing here builds
config.override_method("LlamaRMSNorm.forward", replacement=llama_rmsnorm_forward_patched)
config.override_method("LlamaForCausalLM.forward", replacement=llama_forcausallm_forward_patched)
# NPU441: the classification head's `__init__` re-registered on the causal-LM head (a score layer, no lm_head)
config.override_method("LlamaForCausalLM.__init__", replacement=llama_seq_cls_init_patched)


def llama_partial_rope_init(self, config):
    # NPU209: `rope/partial` has no NPU row while `rope/full` has one (reported in ops/kernels/rotary.py)
    self.veomni_rope = VeomniOp("rope", "partial", resolve_op_impl("rotary_pos_emb_implementation"))
