"""Kernel registration for the toy scan op."""

from veomni.ops.kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec

# NPU308: the Triton scan is imported when the registry loads, not inside its factory
from .triton_scan import triton_scan


def _triton_scan_factory():
    return triton_scan


def _npu_scan_factory():
    from .ascend_scan import scan_npu

    return scan_npu


KERNEL_REGISTRY.register(
    KernelSpec(
        name="triton",
        op_name="toy_scan",
        variant="standard",
        factory=_triton_scan_factory,
        hardware=HardwareRequirement(device_type="gpu"),
    )
)
KERNEL_REGISTRY.register(
    KernelSpec(
        name="npu",
        op_name="toy_scan",
        variant="standard",
        factory=_npu_scan_factory,
        hardware=HardwareRequirement(device_type="npu"),
    )
)

# NPU223: the GPU-only `triton` row is resolved when the package loads, before the ops config is applied
_toy_scan = KERNEL_REGISTRY.resolve("toy_scan", "standard", "triton")
