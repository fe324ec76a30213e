from ....utils.device import IS_CUDA_AVAILABLE


def register_toy_moe_modeling(architecture: str):
    if not IS_CUDA_AVAILABLE:
        from .generated.patched_modeling_toy_moe_npu import ToyMoeForCausalLM
    else:
        from .generated.patched_modeling_toy_moe_gpu import ToyMoeForCausalLM
    return ToyMoeForCausalLM
