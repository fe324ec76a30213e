"""Stream helpers of this demo tree."""

import torch

from .device import IS_CUDA_AVAILABLE, IS_NPU_AVAILABLE


def wait_for_current_stream() -> None:
    """Block until the current device stream is idle."""
    if IS_CUDA_AVAILABLE:
        torch.cuda.current_stream().synchronize()  # noqa: NPU102 - the CUDA branch
    elif IS_NPU_AVAILABLE:
        torch.cuda.current_stream().synchronize()  # noqa: NPU102 - NPU107: the NPU branch calls the CUDA runtime
