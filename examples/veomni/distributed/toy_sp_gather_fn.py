"""A sequence-parallel gather as an autograd Function (its forward lost a ctx line)."""

import torch
import torch.distributed as dist


class GatherSeq(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, group: dist.ProcessGroup, dim: int) -> torch.Tensor:
        ctx.group = group
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts, dim=dim)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        rank = dist.get_rank(ctx.group)
        return grad.chunk(dist.get_world_size(ctx.group), dim=ctx.dim)[rank], None, None  # NPU634: ctx.dim unset
