"""Sequence-parallel communication of the example tree: gather the sequence shards of every rank, reduce
the loss over them."""

import torch
import torch.distributed as dist


class GatherSequence(torch.autograd.Function):
    @staticmethod
    def forward(ctx, group, local, dim):
        ctx.group, ctx.dim = group, dim
        ctx.rank = dist.get_rank(group)
        shards = [torch.empty_like(local) for _ in range(dist.get_world_size(group))]
        dist.all_gather(shards, local.contiguous(), group=group)
        return torch.cat(shards, dim=dim)

    @staticmethod
    def backward(ctx, grad):
        # NPU606: every rank used the gathered sequence; without an all_reduce the other ranks' gradients are lost
        world = dist.get_world_size(ctx.group)
        return None, grad.chunk(world, dim=ctx.dim)[ctx.rank].contiguous(), None


def shard_sequence(hidden_states, dim, group):
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    chunk = hidden_states.size(dim) // world
    # NPU607: a view of the whole sequence whenever the slice is already contiguous; `.clone()` owns its storage
    return hidden_states.narrow(dim, rank * chunk, chunk).contiguous()


def scatter_heads(hidden_states, group, world):
    outputs = [torch.empty_like(hidden_states.narrow(2, 0, hidden_states.size(2) // world)) for _ in range(world)]
    # NPU609: the pieces of a split along the head dimension are views with gaps: HCCL rejects them
    dist.all_to_all(outputs, list(hidden_states.chunk(world, dim=2)), group=group)
    return torch.cat(outputs, dim=1)


def sp_token_mean_loss(loss, num_valid_tokens, group):
    """The token-mean loss of a sequence split over `group`: every rank returns the same value."""
    loss_sum = loss * num_valid_tokens
    dist.all_reduce(loss_sum, group=group)
    # NPU421: the summed loss is divided by this rank's count; the counts must be all-reduced too (and guarded)
    return loss_sum / num_valid_tokens


def _gather_shards(x, group):
    parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, x, group=group)
    return parts, [p.shape[0] for p in parts]


def gather_for_loss(x, group):
    # NPU613: the (shards, sizes) pair is used as the gathered tensor
    full = _gather_shards(x, group)
    return full.flatten(0, 1)


class ReduceTokenMeanLoss(torch.autograd.Function):
    """The token-mean loss over a sequence-parallel group, with its gradient written out."""

    @staticmethod
    def forward(ctx, loss, num_valid_tokens, group):
        local_tokens = num_valid_tokens.detach().clone()
        loss_sum = loss * num_valid_tokens
        dist.all_reduce(loss_sum, group=group)
        dist.all_reduce(num_valid_tokens, group=group)
        ctx.save_for_backward(local_tokens, num_valid_tokens)
        ctx.sp_size = dist.get_world_size(group)
        return loss_sum / num_valid_tokens.clamp(min=1)

    @staticmethod
    def backward(ctx, grad_output):
        local_tokens, global_tokens = ctx.saved_tensors
        # NPU444: `ctx.sp_size` is kept for the gradient and never read: every rank's gradient is off by the SP size
        return local_tokens * grad_output / global_tokens.clamp(min=1), None, None
