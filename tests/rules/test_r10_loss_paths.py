"""Round 10 loss-path contracts (npu_lint/veomni/losspath.py): variants another engineer would write of each
contract, the lines they must be reported at, and correct variants that stay quiet."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source


def _lines(code: str, text: str, path: str) -> list[int]:
    src = SourceFile.from_text(path, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, [code], Settings()) if d.code == code)


TRAINER = "veomni/trainer/toy_preference_trainer.py"

PREFERENCE = """
import torch.nn.functional as F


class Trainer:
    @staticmethod
    def objective(win_logps, lose_logps, ref_win_logps, ref_lose_logps, beta, label_smoothing=0.0):
        policy_logratio = win_logps - lose_logps
        reference_logratio = ref_lose_logps - ref_win_logps
        margin = policy_logratio - reference_logratio
        losses = -F.logsigmoid(beta * margin) * (1 - label_smoothing) - F.logsigmoid(-beta * margin) * label_smoothing
        win_reward = beta * (ref_win_logps - win_logps).detach()
        return losses, win_reward

    def step(self, pw, pl, ref_win_logps, ref_lose_logps):
        return self.objective(pw, pl, ref_lose_logps, ref_win_logps, beta=0.1)
"""


def test_preference_difference_order() -> None:
    # the reference ratio reversed (line 8), the reward reversed (line 11), the reference args swapped (line 15)
    assert _lines("NPU437", PREFERENCE, TRAINER) == [8, 11, 15, 15]


def test_preference_difference_order_quiet() -> None:
    fixed = PREFERENCE.replace("ref_lose_logps - ref_win_logps", "-(ref_win_logps - ref_lose_logps)")
    fixed = fixed.replace("(ref_win_logps - win_logps)", "(win_logps - ref_win_logps)")
    fixed = fixed.replace(
        "pl, ref_lose_logps, ref_win_logps, beta", "pl, ref_win_logps, ref_lose_logps, beta"
    )
    assert _lines("NPU437", fixed, TRAINER) == []


TEMPERATURE = """
import torch.nn.functional as F


def objective(pi_logratios, ref_logratios, beta, label_smoothing, kind):
    logits = pi_logratios - ref_logratios
    if kind == "ipo":
        losses = (logits - 1 / 2) ** 2
    else:
        losses = -F.logsigmoid(beta * logits) * (1 - label_smoothing) - F.logsigmoid(beta * logits) * label_smoothing
    return losses


def rewards(policy_chosen_logps, reference_chosen_logps, policy_rejected_logps, reference_rejected_logps, beta):
    chosen_rewards = beta * (policy_chosen_logps - reference_chosen_logps)
    rejected_rewards = policy_rejected_logps - reference_rejected_logps
    return chosen_rewards, rejected_rewards
"""


def test_preference_temperature() -> None:
    # IPO without beta (7), both smoothed terms with one sign (9), one reward unscaled (15)
    assert _lines("NPU438", TEMPERATURE, TRAINER) == [7, 9, 15]


def test_preference_temperature_quiet() -> None:
    fixed = TEMPERATURE.replace("(logits - 1 / 2) ** 2", "(logits - 1 / (2 * beta)) ** 2")
    fixed = fixed.replace(
        "- F.logsigmoid(beta * logits) * label_smoothing", "- F.logsigmoid(-beta * logits) * label_smoothing"
    )
    fixed = fixed.replace("rejected_rewards = policy", "rejected_rewards = beta * policy")
    assert _lines("NPU438", fixed, TRAINER) == []


TEMPLATE = "veomni/data/toy_chat_template.py"

TEMPLATES = """
IGNORE_INDEX = -100


def plain(tokenizer, messages):
    labels = []
    for message in messages:
        role = message["role"]
        ids = tokenizer.encode(message["content"])
        supervised = message.get("loss_mask", 1 if role in ("assistant", "user") else 0)
        labels.extend(ids if supervised == 1 else [IGNORE_INDEX] * len(ids))
    return labels


def branches(tokenizer, messages):
    labels = []
    for message in messages:
        ids = tokenizer.encode(message["content"])
        if message["role"] != "assistant":
            labels.extend(ids)
        else:
            labels.extend(ids)
    return labels


def header(tokenizer, messages):
    labels = []
    for message in messages:
        ids = tokenizer.encode("<|im_start|>" + message["role"] + "\\n")
        head = len(ids)
        ids += tokenizer.encode(message["content"])
        if message["loss_mask"]:
            labels.extend(ids)
        else:
            labels.extend([IGNORE_INDEX] * len(ids))
    return labels
"""


def test_prompt_turn_supervised() -> None:
    assert _lines("NPU439", TEMPLATES, TEMPLATE) == [9, 19, 32]


def test_prompt_turn_supervised_quiet() -> None:
    fixed = TEMPLATES.replace('1 if role in ("assistant", "user") else 0', "int(role == 'assistant')")
    fixed = fixed.replace(
        'if message["role"] != "assistant":\n            labels.extend(ids)',
        'if message["role"] != "assistant":\n            labels.extend([IGNORE_INDEX] * len(ids))',
    )
    fixed = fixed.replace(
        'if message["loss_mask"]:\n            labels.extend(ids)',
        'if message["loss_mask"]:\n            labels.extend([IGNORE_INDEX] * head + ids[head:])',
    )
    assert _lines("NPU439", fixed, TEMPLATE) == []


POSTFORWARD = """
import torch.nn.functional as F


def postforward(outputs, logits, labels):
    flat = labels.view(-1)
    loss = F.cross_entropy(logits, flat, ignore_index=-100, reduction="sum") / flat.numel()
    outputs.loss = loss
    return outputs


def postforward_sum(outputs, logits, labels):
    loss = F.nll_loss(logits.log_softmax(-1), labels.view(-1), reduction="none").sum()
    outputs.loss = loss
    return outputs
"""


def test_summed_loss_handed_on() -> None:
    assert _lines("NPU440", POSTFORWARD, "veomni/trainer/toy_trainer.py") == [6, 12]


def test_summed_loss_handed_on_quiet() -> None:
    fixed = POSTFORWARD.replace("/ flat.numel()", "/ (flat != -100).sum().clamp(min=1)")
    fixed = fixed.replace('reduction="none").sum()', 'reduction="mean")')
    assert _lines("NPU440", fixed, "veomni/trainer/toy_trainer.py") == []


COUNTS = """
from ..utils.dist_utils import all_reduce


def denominators(rank_token_len):
    return {k: all_reduce(v.item(), op="mean") for k, v in rank_token_len.items()}


def global_items(num_items_in_batch, group):
    return float(all_reduce(num_items_in_batch, group=group))
"""


def test_count_reduced_not_summed() -> None:
    assert _lines("NPU442", COUNTS, "veomni/utils/toy_loss_utils.py") == [5, 9]


def test_count_reduced_not_summed_quiet() -> None:
    fixed = COUNTS.replace('op="mean"', 'op="sum"').replace("group=group", 'op="sum", group=group')
    assert _lines("NPU442", fixed, "veomni/utils/toy_loss_utils.py") == []


SPEC = """
from veomni.patchgen import PatchConfig

from .toy_gpu_patch_gen_config import toy_causal_lm_forward_patched, toy_forcausallm_init_patched, toy_seq_cls_init_patched

config = PatchConfig(source_module="transformers.models.toy.modeling_toy", target_file="patched_toy_npu.py")
config.override_method("ToyForCausalLM.__init__", replacement=toy_seq_cls_init_patched)
config.override_method("ToyForCausalLM.forward", replacement=toy_forcausallm_init_patched)
config.override_method("ToyForCausalLM.forward", replacement=toy_causal_lm_forward_patched)
"""


def test_replacement_head_mismatch() -> None:
    path = "veomni/models/transformers/toy/toy_npu_patch_gen_config.py"
    assert _lines("NPU441", SPEC, path) == [6, 7]


BACKWARD = """
import torch
import torch.distributed as dist


class TokenMeanLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, loss, count, group):
        ctx.scale = dist.get_world_size(group)
        local = count.clone()
        dist.all_reduce(count, group=group)
        ctx.save_for_backward(local, count)
        return loss * local / count

    @staticmethod
    def backward(ctx, grad):
        local, total = ctx.saved_tensors
        grad = ctx.scale * grad / total
        return grad, None, None
"""


def test_backward_drops_saved_factor() -> None:
    assert _lines("NPU444", BACKWARD, "veomni/distributed/toy_loss.py") == [17]
    fixed = BACKWARD.replace("ctx.scale * grad / total", "ctx.scale * local * grad / total")
    assert _lines("NPU444", fixed, "veomni/distributed/toy_loss.py") == []
    assert (
        _lines("NPU444", BACKWARD.replace("TokenMeanLoss", "Cumulation"), "veomni/ops/toy_attention.py") == []
    )  # not a loss path


BOUNDARY = """
IGNORE_INDEX = -100


def first(rows):
    for i in range(1, len(rows)):
        rows[i][-1] = IGNORE_INDEX


def last(rows):
    for i in range(len(rows) - 1):
        rows[i][0] = IGNORE_INDEX


def fine(rows):
    for i in range(len(rows) - 1):
        rows[i][-1] = IGNORE_INDEX
    for i in range(1, len(rows)):
        rows[i][0] = IGNORE_INDEX
"""


def test_packing_boundary_side() -> None:
    assert _lines("NPU446", BOUNDARY, "veomni/data/toy_collator.py") == [6, 11]


TOKENS = """
IGNORE_INDEX = -100


def count(batch, token_len):
    token_len["text_tokens"] += len(batch["labels"])
    token_len["image_tokens"] = (batch["image_labels"] == IGNORE_INDEX).sum()
    token_len["video_tokens"] = (batch["video_labels"] != IGNORE_INDEX).sum()
    num_pad = (batch["labels"] == IGNORE_INDEX).sum()
    return token_len, num_pad
"""


def test_loss_token_count() -> None:
    assert _lines("NPU447", TOKENS, "veomni/utils/toy_loss_utils.py") == [5, 6]


ROUTER = """
import torch


def route(self, scores):
    top, idx = torch.topk(scores, self.n_routed_experts, dim=-1)
    top2, idx2 = scores.topk(self.top_k, dim=-1)
    return top, idx, top2, idx2
"""


def test_topk_over_all_experts() -> None:
    assert _lines("NPU448", ROUTER, "veomni/models/transformers/toy/toy_gpu_patch_gen_config.py") == [5]


def test_preference_margin_of_ratios() -> None:
    code = """
    def margin(pi_logratios, ref_logratios):
        return ref_logratios - pi_logratios
    """
    assert _lines("NPU437", code, TRAINER) == [2]
    assert (
        _lines(
            "NPU437", code.replace("ref_logratios - pi_logratios", "pi_logratios - ref_logratios"), TRAINER
        )
        == []
    )


def test_aux_loss_top_k_defaulted() -> None:
    code = """
    def aux(self, outputs, mask):
        a = self.load_balancing_loss(outputs.router_logits, num_experts=self.num_experts, attention_mask=mask)
        b = load_balancing_loss_func(outputs.router_logits, self.num_experts, top_k=self.num_experts_per_tok)
        c = load_balancing_loss_func(outputs.router_probs, outputs.expert_indexes)
        return a, b, c
    """
    assert _lines("NPU449", code, "veomni/models/transformers/toy/toy_gpu_patch_gen_config.py") == [2]


def test_loss_token_count_of_ignored_keyed_labels() -> None:
    code = """
    IGNORE_INDEX = -100


    def count(obj, token_len):
        for key in obj:
            if key.endswith("_labels"):
                token_len[f"{key[:-7]}_tokens"] = (obj[key] == IGNORE_INDEX).sum()
    """
    assert _lines("NPU447", code, "veomni/utils/toy_loss_utils.py") == [7]


def test_summed_loss_assigned_to_the_output_directly() -> None:
    code = """
    import torch.nn.functional as F


    def postforward(outputs, logits, labels):
        outputs.loss = F.cross_entropy(logits, labels.view(-1), ignore_index=-100, reduction="sum")
        return outputs
    """
    assert _lines("NPU440", code, "veomni/trainer/toy_trainer.py") == [5]
    assert _lines("NPU440", code.replace('"sum"', '"mean"'), "veomni/trainer/toy_trainer.py") == []


def test_output_logits_uncast() -> None:
    code = """
    import torch
    import torch.nn as nn


    def postforward(outputs, micro_batch):
        logits = outputs.logits
        labels = micro_batch["labels"]
        logits = torch.cat(logits, dim=0)
        loss = nn.functional.cross_entropy(logits, labels.view(-1), ignore_index=-100, reduction="mean")
        outputs.loss = loss
        return outputs
    """
    path = "veomni/trainer/toy_rl_trainer.py"
    assert _lines("NPU450", code, path) == [9]
    fixed = code.replace(
        "logits = torch.cat(logits, dim=0)", "logits = torch.cat(logits, dim=0)\n    logits = logits.float()"
    )
    assert _lines("NPU450", fixed, path) == []
