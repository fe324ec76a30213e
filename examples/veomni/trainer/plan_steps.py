"""A trainer step written against older helper signatures."""

import torch

from ..distributed.shard_plan import gather_shards, shard_sizes
from ..utils.device import get_device_type


def plan(total: int, world_size: int) -> list[int]:
    return shard_sizes(total, world_size, pad_multiple=8)  # NPU510: the keyword is `pad_to_multiple`


def regather(grad: torch.Tensor, world_size: int) -> torch.Tensor:
    gathered = gather_shards(grad, world_size)
    return gathered / world_size  # NPU511: a (shards, sizes) pair used as the tensor


def any_nonfinite(local: torch.Tensor, per_group: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.logical_or(local, *per_group.values())  # NPU512: two operands only


def device_label() -> str:
    return get_device_type()
