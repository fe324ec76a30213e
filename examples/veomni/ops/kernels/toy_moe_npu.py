"""Expert-parallel MoE forward of this demo tree on Ascend (grouped matmul over per-expert token counts)."""

import torch
import torch_npu


def toy_ep_moe_forward(hidden_states, weight, selected_experts, count_tokens):
    selected_experts = selected_experts.to(torch.int32)  # the NPU permute/dispatch kernels want int32 indices
    tokens_per_expert = count_tokens(selected_experts)
    # NPU307: the counts keep the int32 dtype; npu_grouped_matmul needs an int64 group list
    return torch_npu.npu_grouped_matmul([hidden_states], [weight], group_list=tokens_per_expert, group_type=0)[0]


def toy_route_tokens_npu(router_logits, num_experts, top_k):
    scores = router_logits.float().softmax(dim=-1)
    # NPU448: `k` is the number of experts: every token is routed to all of them
    weights, selected_experts = torch.topk(scores, num_experts, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights.to(router_logits.dtype), selected_experts.to(torch.int32)
