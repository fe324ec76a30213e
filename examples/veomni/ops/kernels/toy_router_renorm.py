# NPU460: renormalised over the tokens
import torch


def route(router_probs, top_k):
    top_value, top_index = torch.topk(router_probs, top_k, dim=-1)
    top_value /= top_value.sum(dim=0, keepdim=True)
    return top_value, top_index
