# NPU213: planted example (see examples/README.md)
from ...registry import register_op
from ...requirement import CudaKernelRequirement, NpuKernelRequirement
from .scan import ascend as scan_ascend
from .scan import triton as scan_triton

register_op("prefix_scan", "standard", "triton", scan_triton.run, requirement=CudaKernelRequirement())
register_op("prefix_scan", "standard", "triton", scan_ascend.run, requirement=NpuKernelRequirement())
