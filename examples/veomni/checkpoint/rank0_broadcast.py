"""Rank-0 checkpoint loading: rank 0 reads, the others receive (demo)."""

import torch
import torch.distributed as dist


def broadcast_weights(reader, device, rank):
    for meta in reader.metadata():
        tensor = reader.load(meta.name).to(device) if rank == 0 else None
        if rank != 0:
            tensor = torch.empty(meta.shape, dtype=meta.dtype, device=device)
        # NPU618: FP8 checkpoint tensors go to the collective in their own dtype
        dist.broadcast(tensor, src=0)
        yield meta.name, tensor
