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


def causal_lm_loss(model, hidden_states, labels, fused_loss=None, **kwargs):
    """The loss of a causal-LM head: the fused kernel when one is bound, the eager wrapper otherwise."""
    if fused_loss is not None:
        return fused_loss(
            logits=None,
            labels=labels,
            hidden_states=hidden_states,
            weights=model.lm_head.weight,
            vocab_size=model.vocab_size,
            **kwargs,
        )
    logits = model.lm_head(hidden_states)
    # NPU427: the eager branch gets neither the hidden states nor the head weight the fused branch passes
    return model.loss_function(logits=logits, labels=labels, vocab_size=model.vocab_size, **kwargs)
