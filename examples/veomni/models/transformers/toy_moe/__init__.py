from ....utils.device import IS_NPU_AVAILABLE
from ...loader import MODELING_REGISTRY


@MODELING_REGISTRY.register("toy_moe")
def register_toy_moe_modeling(architecture: str):
    if IS_NPU_AVAILABLE:
        from .generated.patched_modeling_toy_moe_npu import ToyMoeForCausalLM
    else:
        from .generated.patched_modeling_toy_moe_gpu import ToyMoeForCausalLM
    return ToyMoeForCausalLM
