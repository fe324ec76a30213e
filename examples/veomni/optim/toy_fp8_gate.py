"""When the fp8 Newton-Schulz kernel (CUDA only) may run (planted bug: NPU105 the probe gives every non-CUDA
device no reason, so Ascend tensors reach the CUDA kernel instead of the eager fallback)."""

from typing import Optional

import torch


def fp8_kernel_unavailable_reason(grad: torch.Tensor) -> Optional[str]:
    if grad.device.type != "cuda":  # NPU105
        return None
    major, minor = torch.cuda.get_device_capability(grad.device)  # noqa: NPU102 - CUDA devices only here
    if major < 9:
        return f"compute capability {major}.{minor} is unsupported; the fp8 kernel needs 9.0"
    return None
