from ....utils.device import IS_NPU_AVAILABLE
from .device_patch import apply_toy_device_patch


def register_toy_modeling(architecture: str):
    if IS_NPU_AVAILABLE:
        from .generated import patched_modeling_toy_npu as gen
    else:
        from .generated import patched_modeling_toy_gpu as gen

        apply_toy_device_patch(gen)
    return gen.ToyForCausalLM
