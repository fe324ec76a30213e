"""The query/key projection of an async Ulysses step (a copy-paste slip in the key's line)."""

import torch
import torch.nn.functional as F


def qk_projection(
    hidden_states: torch.Tensor,
    q_weight: torch.Tensor,
    k_weight: torch.Tensor,
    q_bias: torch.Tensor,
    k_bias: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    q = F.linear(hidden_states, q_weight, q_bias)
    k = F.linear(hidden_states, k_weight, q_bias)  # NPU727: `k_bias` was meant; it is never read
    return q, k
