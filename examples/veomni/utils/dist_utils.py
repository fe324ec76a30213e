"""Distributed helpers of this demo tree (VeOmni's `all_reduce` helper, in miniature: it averages by default)."""

import torch
import torch.distributed as dist

from .device import get_device_type

_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}


def all_reduce(data, op="mean", group=None):
    """All-reduces a number or a tensor over `group`; `op` is "mean", "sum" or "max"."""
    tensor = torch.as_tensor(data, dtype=torch.float32, device=get_device_type())
    dist.all_reduce(tensor, op=_OPS.get(op, dist.ReduceOp.SUM), group=group)
    if op == "mean":
        tensor = tensor / dist.get_world_size(group)
    return tensor.item() if not torch.is_tensor(data) else tensor
