"""Eager MoE auxiliary (load-balancing) loss: what an NPU run computes, having no Triton kernel."""

import torch


def eager_load_balancing_loss(router_logits, num_experts, top_k=2):
    flat = torch.cat(list(router_logits), dim=0).float()
    probs = flat.softmax(dim=-1)
    _, picked = probs.topk(top_k, dim=-1)
    tokens_per_expert = torch.bincount(picked.flatten(), minlength=num_experts).float() / picked.numel()
    prob_per_expert = probs.mean(dim=0)
    # NPU420: the `num_experts *` scale is gone: a balanced router scores 1/num_experts, not 1 as on the GPU path
    return torch.sum(tokens_per_expert * prob_per_expert)


def add_router_aux_loss(loss, router_logits, num_experts, aux_loss_coef):
    # NPU449: no top-k handed over: the default `top_k=2` stands in for the model's `num_experts_per_tok`
    aux_loss = eager_load_balancing_loss(router_logits, num_experts)
    return loss + aux_loss_coef * aux_loss
