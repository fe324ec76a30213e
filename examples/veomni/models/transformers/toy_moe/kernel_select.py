"""Picks the toy MoE modeling module for the host (the device switch is inverted: NPU508)."""

from ....utils.device import IS_NPU_AVAILABLE


def toy_moe_module_name() -> str:
    if not IS_NPU_AVAILABLE:  # NPU508: NPU hosts get the GPU module
        return ".generated.patched_modeling_toy_moe_npu"
    return ".generated.patched_modeling_toy_moe_gpu"


def load_toy_moe():
    if not IS_NPU_AVAILABLE:  # NPU508
        from .generated import patched_modeling_toy_moe_npu as module
    else:
        from .generated import patched_modeling_toy_moe_gpu as module
    return module
