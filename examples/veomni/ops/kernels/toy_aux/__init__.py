"""Auxiliary-loss kernels of this demo tree: an eager row and a CUDA-only fused row."""

from ...registry import register_op
from ...requirement import CudaKernelRequirement

register_op("aux_loss", "standard", "eager", None)
register_op("aux_loss", "standard", "fused", None, requirement=CudaKernelRequirement())

_aux_kernel = "eager"


def bind_aux_kernel(kernel: str = "fused") -> None:
    """Select the auxiliary-loss kernel the trainer calls (the GPU kernel by default)."""
    global _aux_kernel
    _aux_kernel = kernel
