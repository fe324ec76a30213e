"""Kernel registration for rms_norm (not model code: vendor imports are allowed here, lazily)."""

from veomni.ops import register_op
from veomni.ops.requirement import NpuKernelRequirement

from .eager import eager_rms_norm


def _npu_rms_norm(hidden_states, weight, eps=1e-6):
    import torch_npu

    return torch_npu.npu_rms_norm(hidden_states, weight, epsilon=eps)[0]


register_op("rms_norm", "standard", "eager", forward=eager_rms_norm, description="reference RMSNorm")
register_op("rms_norm", "standard", "npu", forward=_npu_rms_norm, description="Ascend fused RMSNorm")
# NPU409: the offset variant multiplies by `1 + weight`, but `_npu_rms_norm` passes the weight as given
register_op(
    "rms_norm",
    "offset",
    "npu",
    forward=_npu_rms_norm,
    requirement=NpuKernelRequirement(),
    description="Ascend fused RMSNorm, Gemma-style weight",
)
