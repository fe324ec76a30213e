"""Shard planning helpers (called outside their contracts from trainer/plan_steps.py)."""

import torch


def shard_sizes(total: int, world_size: int, *, pad_to_multiple: int = 1) -> list[int]:
    per_rank = -(-total // world_size)
    per_rank = -(-per_rank // pad_to_multiple) * pad_to_multiple
    return [per_rank] * world_size


def gather_shards(x: torch.Tensor, world_size: int) -> tuple[list[torch.Tensor], list[int]]:
    shards = list(x.chunk(world_size))
    return shards, [s.shape[0] for s in shards]
