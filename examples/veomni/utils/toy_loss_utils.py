"""Toy loss-token bookkeeping for the global mean loss (planted bugs for NPU442, NPU447)."""

from .dist_utils import all_reduce


def count_loss_tokens(micro_batch, token_len):
    # NPU447: every label position is counted, the ignored ones (padding, prompts) included
    token_len["text_tokens"] = micro_batch["labels"].numel()
    return token_len


def step_denominators(rank_token_len):
    # NPU442: `all_reduce` averages by default: each denominator is the per-rank mean count, not the step's total
    return {key: all_reduce(value) for key, value in rank_token_len.items()}
