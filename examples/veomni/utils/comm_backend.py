"""Device helpers for distributed setup (planted bugs: NPU108 nccl on the NPU branch; NPU109 a CPU accumulator
that a caller all-reduces)."""

import torch
import torch.distributed as dist

from veomni.utils.device import IS_CUDA_AVAILABLE, IS_NPU_AVAILABLE


def comm_backend() -> str:
    if IS_CUDA_AVAILABLE:
        return "nccl"
    elif IS_NPU_AVAILABLE:
        return "nccl"
    return "gloo"


def _local_sq_sum(grads):
    acc = torch.tensor(0.0, dtype=torch.float32)
    for g in grads:
        acc = acc + g.float().pow(2).sum()
    return acc


def grad_norm(grads, group):
    total = _local_sq_sum(grads)
    dist.all_reduce(total, group=group)
    return total.sqrt()
