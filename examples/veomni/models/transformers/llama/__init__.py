from ....utils.device import IS_NPU_AVAILABLE
from ...loader import MODELING_REGISTRY


@MODELING_REGISTRY.register("llama")
def register_llama_modeling(architecture: str):
    if IS_NPU_AVAILABLE:
        from .generated.patched_modeling_llama_npu import LlamaForCausalLM
    else:
        from .generated.patched_modeling_llama_gpu import LlamaForCausalLM
    return LlamaForCausalLM
