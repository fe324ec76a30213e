"""Toy trainer post-forward hooks: the step's loss taken over the logits the model returned (planted bugs for
NPU440, NPU450)."""

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100


def postforward_token_sum(outputs, micro_batch):
    logits = torch.cat(outputs.logits, dim=0).float()
    labels = micro_batch["labels"].view(-1)
    # NPU440: a token sum handed on as the loss: the trainer weights it by the micro-batch's tokens a second time
    outputs.loss = F.cross_entropy(logits, labels, ignore_index=IGNORE_INDEX, reduction="sum")
    return outputs


def postforward_token_mean(outputs, micro_batch):
    logits = torch.cat(outputs.logits, dim=0)
    labels = micro_batch["labels"].view(-1)
    # NPU450: the bf16 logits go into the log-softmax without an upcast to float32
    outputs.loss = F.cross_entropy(logits, labels, ignore_index=IGNORE_INDEX, reduction="mean")
    return outputs
