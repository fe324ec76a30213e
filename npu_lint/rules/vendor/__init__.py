"""NPU3xx: vendor kernels. Model code reaches vendor code (torch_npu, liger_kernel, flash_attn, triton, VeOmni's
own kernel modules) only through a ``VeomniOp``; the registry picks the implementation for the device."""
