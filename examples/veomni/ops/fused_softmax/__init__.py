from ...utils.device import IS_CUDA_AVAILABLE


def set_fused_softmax(enabled: bool = True):
    if enabled:
        from .triton_softmax import register_softmax_override

        register_softmax_override()
