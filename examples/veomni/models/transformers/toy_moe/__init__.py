from ....utils.device import IS_NPU_AVAILABLE
from ...loader import MODELING_REGISTRY


@MODELING_REGISTRY.register("toy_moe")
def register_toy_moe_modeling(architecture: str):
    if IS_NPU_AVAILABLE:
        from .generated.patched_modeling_toy_moe_npu import ToyMoeForCausalLM
    else:
        from .generated.patched_modeling_toy_moe_gpu import ToyMoeForCausalLM
    return ToyMoeForCausalLM


@MODELING_REGISTRY.register("toy_moe_text")
def register_toy_moe_text_modeling(architecture: str):
    # NPU233: only the causal LM gets the NPU module on Ascend; every other architecture the GPU one
    if IS_NPU_AVAILABLE and "ForCausalLM" in architecture:
        from .generated.patched_modeling_toy_moe_npu import ToyMoeForCausalLM
    else:
        from .generated.patched_modeling_toy_moe_gpu import ToyMoeForCausalLM
    return ToyMoeForCausalLM
