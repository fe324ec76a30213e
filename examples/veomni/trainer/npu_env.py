"""Process-wide Ascend settings the trainer applies before building the model."""

import torch

from veomni.utils.device import IS_NPU_AVAILABLE


def configure_npu() -> None:
    if IS_NPU_AVAILABLE:
        torch.npu.config.allow_internal_format = True  # "faster matmuls"
