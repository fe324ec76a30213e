"""Kernel registration for the toy gated-scale op (OpSlot era: ``KernelSpec`` rows with lazy factories)."""

from veomni.ops.kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec


def _triton_gate_factory():
    from .triton_gate import fused_gate

    return fused_gate


def _npu_gate_factory():
    # NPU220: the NPU row's factory returns the Triton kernel of the GPU row above
    from .triton_gate import fused_gate as npu_gate

    return npu_gate


def _triton_dense_scale_factory():
    from .triton_gate import fused_dense_scale

    return fused_dense_scale


def _npu_dense_scale_factory():
    from .ascend_scale import dense_scale_npu

    return dense_scale_npu


def _npu_gated_scale_factory():
    # NPU221: the gated variant's NPU row returns the dense variant's kernel
    from .ascend_scale import dense_scale_npu

    return dense_scale_npu


KERNEL_REGISTRY.register(
    KernelSpec(
        name="triton",
        op_name="toy_gate",
        variant="standard",
        factory=_triton_gate_factory,
        hardware=HardwareRequirement(device_type="gpu"),
    )
)
KERNEL_REGISTRY.register(
    KernelSpec(
        name="npu",
        op_name="toy_gate",
        variant="standard",
        factory=_npu_gate_factory,
        hardware=HardwareRequirement(device_type="npu"),
    )
)
KERNEL_REGISTRY.register(
    KernelSpec(
        name="triton",
        op_name="toy_scale",
        variant="dense",
        factory=_triton_dense_scale_factory,
        # NPU224: a Triton row declared hardware-agnostic: on Ascend its selection passes the hardware gate
        # and the Triton kernel is imported at bind time
        hardware=HardwareRequirement(device_type="any"),
    )
)
KERNEL_REGISTRY.register(
    KernelSpec(
        name="npu",
        op_name="toy_scale",
        variant="dense",
        factory=_npu_dense_scale_factory,
        hardware=HardwareRequirement(device_type="npu"),
    )
)
KERNEL_REGISTRY.register(
    KernelSpec(
        name="npu",
        op_name="toy_scale",
        variant="gated",
        factory=_npu_gated_scale_factory,
        hardware=HardwareRequirement(device_type="npu"),
    )
)
