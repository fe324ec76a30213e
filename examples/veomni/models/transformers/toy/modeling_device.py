"""Device and distributed helpers of the toy model, written the CUDA-only way (npu-lint's demo).

Every function here runs fine on NVIDIA GPUs and breaks, or silently degrades, on Ascend NPUs.
"""

import torch
import torch.distributed as dist
from torch import nn

from veomni.distributed.parallel_state import get_parallel_state


def init_toy_distributed(rank: int, world_size: int, device: str = "cuda") -> torch.device:
    """Process-group set-up for the toy trainer."""
    dist.init_process_group(backend="nccl", rank=rank, world_size=world_size)
    torch.cuda.set_device(rank)
    return torch.device(device, torch.cuda.current_device())


class ToyGatedMLP(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.gate = nn.Parameter(torch.ones(hidden))  # init-time allocation: fine
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        seq_len = hidden_states.shape[1]
        positions = torch.arange(seq_len)
        scale = hidden_states.new_ones(seq_len, 1).type(torch.cuda.HalfTensor)
        with torch.autocast(device_type="cuda", enabled=False):
            up = self.up(hidden_states.float())
        if hidden_states.is_cuda:
            torch.cuda.synchronize()
        out = self.down(up * self.gate) * scale
        return out + positions[None, :, None].to(out.dtype)


def average_toy_loss(loss: torch.Tensor) -> torch.Tensor:
    """Average the loss over the sequence-parallel group."""
    group = get_parallel_state().sp_group
    dist.all_reduce(loss, op=dist.ReduceOp.AVG, group=group)
    if dist.get_rank() == 0:
        print(f"loss over {dist.get_world_size(group)} ranks: {loss.item():.4f}")
    return loss
