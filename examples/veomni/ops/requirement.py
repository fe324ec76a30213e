"""Kernel requirements of this demo tree: the device a registry row needs (the shape VeOmni uses)."""


class NpuKernelRequirement:
    device = "npu"


class CudaKernelRequirement:
    device = "cuda"
