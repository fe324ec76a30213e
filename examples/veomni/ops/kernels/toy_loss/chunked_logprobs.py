"""A toy chunked log-prob kernel that recomputes the logits in its backward (planted bug for NPU434)."""

import torch


class ToyChunkedLogProbs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, labels, temperature, ignore_index):
        logits = (hidden @ weight.t()) / temperature
        logits = logits.float()
        keep = labels != ignore_index
        ctx.save_for_backward(hidden, weight, labels)
        ctx.temperature = temperature
        ctx.ignore_index = ignore_index
        picked = logits.log_softmax(-1).gather(-1, labels.clamp(min=0)[:, None])[:, 0]
        return torch.where(keep, picked, torch.zeros_like(picked))

    @staticmethod
    def backward(ctx, grad):
        hidden, weight, labels = ctx.saved_tensors
        # NPU434: the recomputed logits skip the temperature the forward divided by
        logits = (hidden @ weight.t()).float()
        keep = (labels != ctx.ignore_index).float()
        one_hot = torch.zeros_like(logits).scatter_(-1, labels.clamp(min=0)[:, None], 1.0)
        dlogits = (grad * keep)[:, None] * (one_hot - logits.softmax(-1))
        return dlogits.to(hidden.dtype) @ weight, None, None, None, None
