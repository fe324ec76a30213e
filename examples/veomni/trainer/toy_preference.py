"""A toy preference trainer's sequence log-prob (planted bug for NPU435)."""

IGNORE_INDEX = -100


def sequence_logps(per_token_logps, labels, average_log_prob):
    loss_mask = labels != IGNORE_INDEX
    if average_log_prob:
        # NPU435: divided by every position, the prompt and padding included
        return (per_token_logps * loss_mask).sum(-1) / labels.numel()
    return (per_token_logps * loss_mask).sum(-1)
