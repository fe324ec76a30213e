"""An owner-based all-to-all of 2-D optimizer updates (demo)."""

import torch
import torch.distributed as dist


def _exchange(entries, group):
    send = [update.contiguous() for _, update in entries]
    recv = [torch.empty_like(update) for update in send]
    dist.all_to_all(recv, send, group=group)
    return recv


def orthogonalize_step(params, group):
    buckets = {}
    for p in params:
        update = p.grad
        # NPU617: bucketed by mesh only; fp32 routers and bf16 weights share one all-to-all
        entries = buckets.setdefault(update.device_mesh, [])
        entries.append((p, update))
    for entries in buckets.values():
        _exchange(entries, group)
