"""Gradient clipping of the example tree when FSDP2 offloads parameters to the CPU."""

import torch
import torch.distributed as dist

from veomni.distributed.parallel_state import get_parallel_state


@torch.no_grad()
def offload_clip_grad_norm(model, max_norm, norm_type=2.0):
    state = get_parallel_state()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    total = torch.stack([g.detach().float().norm(norm_type) ** norm_type for g in grads]).sum()
    # NPU614: under HSDP the FSDP group spans the replicas, which hold the same shards
    dist.all_reduce(total, group=state.fsdp_group)
    total = total ** (1.0 / norm_type)
    torch.nn.utils.clip_grads_with_norm_(model.parameters(), max_norm, total)
    return total
