"""Eager fused-linear cross-entropy: projects the hidden states to the vocabulary a slice of tokens at a time, so
the full logits are never materialised (the NPU path's fallback)."""

import torch.nn.functional as F


def chunked_linear_cross_entropy(hidden_states, lm_head_weight, labels, ignore_index=-100, chunk_tokens=2048):
    loss_sum = hidden_states.new_zeros(())
    for h, y in zip(hidden_states.split(chunk_tokens), labels.split(chunk_tokens)):
        logits = F.linear(h, lm_head_weight)
        # NPU422: bf16 logits straight into the cross-entropy; the reference upcasts them (`.float()`) first
        loss_sum = loss_sum + F.cross_entropy(logits, y, ignore_index=ignore_index, reduction="sum")
    return loss_sum / (labels != ignore_index).sum().clamp(min=1)
