"""Ascend scale kernels (stand-ins)."""


def dense_scale_npu(x, scale):
    return x * scale


def gated_scale_npu(x, scale, gate):
    return x * scale * gate.sigmoid()
