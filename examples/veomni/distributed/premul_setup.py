"""FSDP2 wrapping of extra-parallel modules on Ascend (demo)."""

from veomni.ops.platform.npu import apply_hccl_premul_sum_patch
from veomni.utils.device import IS_NPU_AVAILABLE


def wrap_extra_parallel(model, parallel_state, extra_modules):
    # NPU616: the PREMUL_SUM patch only under expert parallelism, the divide factor for every extra dimension
    if IS_NPU_AVAILABLE and parallel_state.ep_enabled:
        apply_hccl_premul_sum_patch()
    for para in parallel_state.extra_parallel_names:
        if not parallel_state.extra_parallel_enabled(para):
            continue
        for module in extra_modules[para]:
            module.set_reduce_scatter_divide_factor(parallel_state.extra_parallel_gradient_divide_factor(para))
    return model
