"""Kernel registration for rms_norm (not model code: vendor imports are allowed here, lazily)."""

from veomni.ops import register_op


def _npu_rms_norm(hidden_states, weight, eps=1e-6):
    import torch_npu

    return torch_npu.npu_rms_norm(hidden_states, weight, epsilon=eps)[0]


register_op("rms_norm", "standard", "npu", forward=_npu_rms_norm, description="Ascend fused RMSNorm")
