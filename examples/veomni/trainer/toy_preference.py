"""A toy preference trainer: the sequence log-prob, the DPO loss and its rewards (planted bugs for NPU435, NPU437,
NPU438)."""

import torch.nn.functional as F

IGNORE_INDEX = -100


def sequence_logps(per_token_logps, labels, average_log_prob):
    loss_mask = labels != IGNORE_INDEX
    if average_log_prob:
        # NPU435: divided by every position, the prompt and padding included
        return (per_token_logps * loss_mask).sum(-1) / labels.numel()
    return (per_token_logps * loss_mask).sum(-1)


def dpo_loss(
    policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps, beta
):
    pi_logratios = policy_chosen_logps - policy_rejected_logps
    # NPU437: the reference log-ratio runs rejected minus chosen: the margin adds it instead of subtracting it
    ref_logratios = reference_rejected_logps - reference_chosen_logps
    return -F.logsigmoid(beta * (pi_logratios - ref_logratios))


def dpo_rewards(
    policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps, beta
):
    chosen_rewards = beta * (policy_chosen_logps - reference_chosen_logps).detach()
    # NPU438: the rejected reward is never scaled by beta: the reward margin compares two scales
    rejected_rewards = (policy_rejected_logps - reference_rejected_logps).detach()
    return chosen_rewards, rejected_rewards
