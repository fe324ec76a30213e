"""A GPU gate kernel (stand-in for a Triton kernel module)."""


def fused_gate(x, gate):
    return x * gate.sigmoid()
