"""GPU gate and scale kernels (stand-ins for a Triton kernel module)."""


def fused_gate(x, gate):
    return x * gate.sigmoid()


def fused_dense_scale(x, scale):
    return x * scale
