"""Loss contracts generalised from the round-5 dev misses, checked at other sites than the dev cases edit (other
files, other functions, other shapes) and on snippets of our own: a loss table binds each head's own loss (NPU419),
labels are shifted once between the SP collator and the loss (NPU412), an auxiliary loss is added to and never
substituted for the main loss (NPU418), capped logits are the only input of the loss on the capped path (NPU411),
a padding mask weights every router statistic (NPU420), an SP shard loss reaches the SP reduction and a global token
weighting undoes the data-parallel mean (NPU421), the loss paths of a function reduce alike (NPU413), and the step's
normaliser is what the step accumulates (NPU423). Each would fail without the rule change."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni.project import Project
from tests.corpus import VEOMNI_MAIN, VEOMNI_OP, shared_tree
from tests.rules.snippets import write_file

SITES = [
    # the eager table entry of the classification head gets the causal wrapper (named, not the same value)
    (
        VEOMNI_MAIN,
        "veomni/ops/kernels/cross_entropy/__init__.py",
        'LOSS_MAPPING["ForSequenceClassification"] = partial(ForSequenceClassificationLoss, cross_entropy_fn=ce_fn)',
        'LOSS_MAPPING["ForSequenceClassification"] = partial(ForCausalLMLoss, cross_entropy_fn=ce_fn)',
        "NPU419",
        1,
    ),
    # a registry factory of the classification head built from the causal wrapper
    (
        VEOMNI_MAIN,
        "veomni/ops/kernels/cross_entropy/__init__.py",
        "    return partial(ForSequenceClassificationLoss, cross_entropy_fn=fused_liger_kernel_cross_entropy)",
        "    return partial(ForCausalLMLoss, cross_entropy_fn=fused_liger_kernel_cross_entropy)",
        "NPU419",
        1,
    ),
    # the log-probs kernel drops its SP branch: the collator's shifted labels are shifted again
    (
        VEOMNI_MAIN,
        "veomni/ops/kernels/cross_entropy/chunk_logprobs.py",
        "    elif sp_enabled:\n        labels_shifted = labels\n    else:\n",
        "    else:\n",
        "NPU412",
        1,
    ),
    # another MoE model's generated forward replaces the LM loss with the auxiliary term
    (
        VEOMNI_MAIN,
        "veomni/models/transformers/qwen3_moe/generated/patched_modeling_qwen3_moe_gpu.py",
        "loss += self.router_aux_loss_coef * aux_loss.to(loss.device)",
        "loss = aux_loss.to(loss.device) * self.router_aux_loss_coef",
        "NPU418",
        1,
    ),
    # the HF-form load-balancing loss of a generated copy drops the mask from P_e
    (
        VEOMNI_MAIN,
        "veomni/models/transformers/qwen3_vl_moe/generated/patched_modeling_qwen3_vl_moe_npu.py",
        "router_prob_per_expert = torch.sum(routing_weights * router_per_expert_attention_mask, dim=0)",
        "router_prob_per_expert = torch.sum(routing_weights, dim=0)",
        "NPU420",
        1,
    ),
    # a decoder head's SP shard loss is no longer reduced over the group
    (
        VEOMNI_MAIN,
        "veomni/models/seed_omni/decoder/movqgan/modeling_movqgan.py",
        "                loss = reduce_sequence_parallel_loss(loss, num_valid_tokens)\n",
        "                pass\n",
        "NPU421",
        1,
    ),
    # the global token weighting divides by the FSDP size where it must multiply
    (
        VEOMNI_MAIN,
        "veomni/utils/loss_utils.py",
        "all_reduced_len * get_parallel_state().fsdp_size",
        "all_reduced_len / get_parallel_state().fsdp_size",
        "NPU421",
        1,
    ),
    # the SP-group-weighted loss is no longer divided by the SP size
    (
        VEOMNI_MAIN,
        "veomni/utils/loss_utils.py",
        "        if get_parallel_state().sp_enabled:\n            cur_loss = cur_loss / get_parallel_state().sp_size\n",
        "",
        "NPU421",
        1,
    ),
    # the step's token count no longer skips the loader's filler micro-batches (another test than the marker's)
    (
        VEOMNI_MAIN,
        "veomni/utils/loss_utils.py",
        'if isinstance(obj, dict) and not obj.get("padding_flag", False):',
        'if isinstance(obj, dict) and obj.get("labels") is not None:',
        "NPU423",
        1,
    ),
    # the generated gemma3 copy of the op tree hands the fused inputs to the capped branch's loss
    (
        VEOMNI_OP,
        "veomni/models_kernel/transformers/gemma3/generated/patched_modeling_gemma3_gpu.py",
        "                loss, _, fused_linear_aux = self.loss_function(\n                    logits=logits,\n",
        "                loss, _, fused_linear_aux = self.loss_function(\n                    logits=logits,\n"
        "                    hidden_states=hidden_states,\n                    weights=self.lm_head.weight,\n",
        "NPU411",
        1,
    ),
]


def _found(root: Path | None, rel: str, text: str, code: str) -> list[int]:
    project = Project(root=str(root)) if root is not None else None
    src = SourceFile.from_text(str(root / rel) if root is not None else rel, text)
    return sorted(d.line for d in lint_source(src, [code], Settings(), project))


@pytest.mark.parametrize(("tree", "rel", "old", "new", "code", "count"), SITES, ids=lambda v: str(v)[-40:])
def test_contract_at_another_site(tree: str, rel: str, old: str, new: str, code: str, count: int) -> None:
    root = shared_tree(tree)
    text = (root / rel).read_text(encoding="utf-8")
    assert text.count(old) == 1
    before = _found(root, rel, text, code)
    after = _found(root, rel, text.replace(old, new), code)
    assert len(after) == len(before) + count, (before, after)


LOADER = """
import copy


def fill_last_step(batch, n_micro, last):
    while len(batch) < n_micro:
        filler = copy.deepcopy(last)
        filler["is_filler_pad"] = True
        batch.append(filler)
    return batch
"""

COUNTER = """
IGNORE = -100


def step_tokens(micro_batches):
    total = 0
    for mb in micro_batches:
        {skip}
        total += (mb["target_labels"] != IGNORE).sum()
    return total
"""


def test_filler_marker_is_read_from_the_trees_loader(tmp_path: Path) -> None:
    write_file(tmp_path, "veomni/data/dynamic_batching.py", LOADER)
    rel = "veomni/trainer/token_count.py"
    bad = textwrap.dedent(COUNTER.format(skip="pass")).lstrip("\n")
    good = textwrap.dedent(COUNTER.format(skip='if mb.get("is_filler_pad"):\n            continue')).lstrip(
        "\n"
    )
    assert _found(tmp_path, rel, bad, "NPU423") == [8]
    assert _found(tmp_path, rel, good, "NPU423") == []
    # a tree whose loader marks nothing: not judged
    other = tmp_path / "other"
    write_file(other, "veomni/data/dynamic_batching.py", LOADER.replace("True", "False"))
    assert _found(other, rel, bad, "NPU423") == []


def test_loss_divided_by_the_micro_batch_size() -> None:
    text = textwrap.dedent(
        """
        def accumulate(self, micro):
            out = self.model(**micro)
            loss = out.loss / self.args.train.micro_batch_size
            parts = [part / self.args.train.micro_batch_size for part in out.loss_parts]
            rows = self.args.train.micro_batch_size * len(micro)
            return loss, parts, rows
        """
    ).lstrip("\n")
    # the loss itself is reported; the list of parts is not a loss container by its iterable's name only
    assert _found(None, "veomni/trainer/acc.py", text, "NPU423") == [3, 4]
    fixed = text.replace("self.args.train.micro_batch_size\n", "self.num_micro_batches\n").replace(
        "part / self.args.train.micro_batch_size", "part / self.num_micro_batches"
    )
    assert _found(None, "veomni/trainer/acc.py", fixed, "NPU423") == []


def test_auxiliary_substitution_needs_a_main_loss_on_the_path() -> None:
    text = textwrap.dedent(
        """
        def total_total_loss(self, lm_out, router_logits):
            total_loss = lm_out.loss
            z_loss = router_z_loss(router_logits)
            total_loss = self.z_coef * z_loss
            return total_loss
        """
    ).lstrip("\n")
    assert _found(None, "veomni/models/toy/modeling_toy.py", text, "NPU418") == [4]
    only_aux = text.replace("    total_loss = lm_out.loss\n", "")
    assert _found(None, "veomni/models/toy/modeling_toy.py", only_aux, "NPU418") == []
    added = text.replace(
        "total_loss = self.z_coef * z_loss", "total_loss = total_loss + self.z_coef * z_loss"
    )
    assert _found(None, "veomni/models/toy/modeling_toy.py", added, "NPU418") == []


def test_reductions_of_one_function_agree() -> None:
    text = textwrap.dedent(
        """
        import torch


        def audio_code_loss(self, logits, codes, liger):
            if liger:
                crit = LigerCrossEntropyLoss(reduction="mean")
            else:
                crit = torch.nn.CrossEntropyLoss(reduction="sum")
            return crit(logits.flatten(0, 1), codes.flatten())
        """
    ).lstrip("\n")
    assert _found(None, "veomni/models/toy/modeling_toy.py", text, "NPU413") == [8]
    same = text.replace('reduction="sum"', 'reduction="mean"')
    assert _found(None, "veomni/models/toy/modeling_toy.py", same, "NPU413") == []


def test_global_token_weighting_needs_the_data_parallel_size() -> None:
    text = textwrap.dedent(
        """
        import torch.distributed as dist


        def token_weighted(loss, tokens):
            world_tokens = tokens.clone()
            dist.all_reduce(world_tokens)
            return loss * tokens / world_tokens * dist.get_world_size()
        """
    ).lstrip("\n")
    assert _found(None, "veomni/utils/weighting.py", text, "NPU421") == []
    dropped = text.replace(" * dist.get_world_size()", "")
    assert _found(None, "veomni/utils/weighting.py", dropped, "NPU421") == [7]


SP_COLLATOR = """
import torch.nn.functional as F


class SequenceParallelCollator:
    def __call__(self, batch):
        labels = batch["labels"][..., 1:].contiguous()
        batch["labels"] = F.pad(labels, (0, 1), value=-100)
        return batch
"""

BLOCKWISE = """
def blockwise_ce(hidden, head_weight, labels, ignore_index=-100):
    state = get_parallel_state()
    {shift}
    loss = block_ce(hidden, head_weight, labels, ignore_index)
    if state.sp_enabled:
        loss = reduce_sequence_parallel_loss(loss, (labels != ignore_index).sum())
    return loss
"""


@pytest.mark.parametrize(
    ("shift", "lines"),
    [
        ("labels, hidden = labels[:, 1:], hidden[:, :-1]", [3]),
        ("if not state.sp_enabled:\n        labels, hidden = labels[:, 1:], hidden[:, :-1]", []),
        (
            "if state.sp_enabled or labels is None:\n        pass\n    else:\n        labels, hidden = labels[:, 1:], hidden[:, :-1]",
            [],
        ),
    ],
)
def test_a_loss_reading_the_sp_switch_shifts_only_without_it(
    tmp_path: Path, shift: str, lines: list[int]
) -> None:
    write_file(tmp_path, "veomni/data/data_collator.py", SP_COLLATOR)
    rel = "veomni/ops/kernels/cross_entropy/blockwise.py"
    text = textwrap.dedent(BLOCKWISE).lstrip("\n").replace("{shift}", shift)
    assert _found(tmp_path, rel, text, "NPU412") == lines
    # a tree whose SP collator does not shift: the loss owns the shift on both settings
    plain = tmp_path / "plain"
    write_file(
        plain, "veomni/data/data_collator.py", SP_COLLATOR.replace('["labels"][..., 1:]', '["labels"]')
    )
    assert _found(plain, rel, text, "NPU412") == []


def test_a_loss_table_in_a_dict_literal(tmp_path: Path) -> None:
    text = textwrap.dedent(
        """
        from .wrappers import ForCausalLMLoss, ForSequenceClassificationLoss

        HEADS = {
            "ForCausalLM": blockwise_causal,
            "ForConditionalGeneration": blockwise_causal,
            "ForTokenClassification": {value},
        }
        """
    ).lstrip("\n")
    rel = "veomni/ops/kernels/cross_entropy/table.py"
    assert _found(None, rel, text.replace("{value}", "blockwise_causal"), "NPU419") == [6]
    assert _found(None, rel, text.replace("{value}", "ForCausalLMLoss"), "NPU419") == [6]
    assert _found(None, rel, text.replace("{value}", "ForSequenceClassificationLoss"), "NPU419") == []


def test_auxiliary_substitution_through_an_output_attribute() -> None:
    text = textwrap.dedent(
        """
        def moe_objective(self, batch):
            out = self.model(**batch)
            train_loss = out.loss
            if out.aux_loss is not None:
                train_loss = self.config.router_aux_loss_coef * out.aux_loss
            return train_loss
        """
    ).lstrip("\n")
    assert _found(None, "veomni/trainer/moe_step.py", text, "NPU418") == [5]
    added = text.replace("train_loss = self.config", "train_loss = train_loss + self.config")
    assert _found(None, "veomni/trainer/moe_step.py", added, "NPU418") == []


def test_sp_shard_loss_through_a_configured_criterion() -> None:
    text = textwrap.dedent(
        """
        import torch.nn as nn

        from veomni.distributed.sequence_parallel import reduce_sequence_parallel_loss


        def codec_loss(self, logits, codes):
            crit = nn.CrossEntropyLoss(ignore_index=-100, label_smoothing=0.1)
            code_loss = crit(logits.flatten(0, 1), codes.flatten())
            if get_parallel_state().sp_enabled:
                {reduce}
            return code_loss
        """
    ).lstrip("\n")
    rel = "veomni/models/seed_omni/decoder/codec/modeling_codec.py"
    assert _found(None, rel, text.replace("{reduce}", "pass"), "NPU421") == [8]
    reduced = text.replace(
        "{reduce}", "code_loss = reduce_sequence_parallel_loss(code_loss, (codes != -100).sum())"
    )
    assert _found(None, rel, reduced, "NPU421") == []


def test_npu421_a_count_renamed_by_its_zero_guard_keeps_its_reduction() -> None:
    """Round 7's control: the SP loss reduction's `loss / num_valid_tokens.clamp_min(1)` written as
    `global_num_tokens = torch.clamp(num_valid_tokens, min=1)` then `loss / global_num_tokens` was reported as a
    division by this rank's count; the renamed count is the all-reduced one. Dropping the count's all-reduce is
    still reported."""
    text = """
    import torch
    import torch.distributed as dist


    def reduce_loss(loss, num_valid_tokens, group):
        loss *= num_valid_tokens
        dist.all_reduce(loss, group=group)
        dist.all_reduce(num_valid_tokens, group=group)
        global_num_tokens = torch.clamp(num_valid_tokens, min=1)
        return loss / global_num_tokens
    """
    rel = "veomni/distributed/sequence_parallel/loss.py"
    assert _found(None, rel, textwrap.dedent(text), "NPU421") == []
    unreduced = text.replace("        dist.all_reduce(num_valid_tokens, group=group)\n", "")
    assert _found(None, rel, textwrap.dedent(unreduced), "NPU421") == [10]


def test_npu406_a_feature_rescaling_without_weight_or_eps_is_not_a_norm_fallback() -> None:
    """Round 7's control: LTX's `norm_and_concat_per_token_rms(encoded_text, attention_mask)` rescales text
    features by their per-token RMS; written `x.pow(2).mean(...)` instead of `torch.mean(x**2, ...)` it was
    reported as an RMSNorm fallback squaring in the input dtype. A fallback that takes the norm's weight is still
    reported."""
    text = """
    import torch


    def per_token_rms(encoded_text, attention_mask):
        variance = encoded_text.pow(2).mean(dim=2, keepdim=True)
        return encoded_text * torch.rsqrt(variance + 1e-6)
    """
    rel = "veomni/models/diffusers/toy/feature_extractor.py"
    assert _found(None, rel, textwrap.dedent(text), "NPU406") == []
    fallback = text.replace("(encoded_text, attention_mask)", "(encoded_text, weight)").replace(
        "return encoded_text *", "return weight * encoded_text *"
    )
    assert _found(None, rel, textwrap.dedent(fallback), "NPU406") == [7]
