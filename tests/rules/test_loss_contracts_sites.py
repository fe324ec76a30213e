"""The loss contracts checked at every site where they hold, on the real trees' own files (read from the shared
corpora, edited in memory; nothing is written): the fp32 upcast of vocabulary logits in every loss kernel and
wrapper (NPU422), the causal shift of the wrapper's labels (NPU412), the logits of the no-labels path (NPU416), the form of the load-balancing loss in kernels and generated copies (NPU420), the router
output recorded as `router_logits` (NPU417), the head the fused loss projects with (NPU419), and the
sequence-parallel loss reduction (NPU421). Each edit is one the round-4 dev cases do not make (other files, other
functions, the other half of a pair); the unedited file is quiet."""

from __future__ import annotations

import textwrap

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from tests.corpus import VEOMNI_MAIN, VEOMNI_OP, shared_tree

SITES = [
    # the eager fallback's fused-linear branch
    (
        VEOMNI_MAIN,
        "veomni/ops/kernels/cross_entropy/eager.py",
        "logits = F.linear(hidden_states, weights).float()",
        "logits = F.linear(hidden_states, weights)",
        "NPU422",
        [36],
    ),
    # the log-prob kernel: through its two helpers (forward) ...
    (
        VEOMNI_MAIN,
        "veomni/ops/kernels/cross_entropy/chunk_logprobs.py",
        "                logits = logits / temperature\n            logits = logits.float()\n\n            log_probs[",
        "                logits = logits / temperature\n\n            log_probs[",
        "NPU422",
        [180, 181],
    ),
    # ... and directly (backward, after the temperature scale)
    (
        VEOMNI_MAIN,
        "veomni/ops/kernels/cross_entropy/chunk_logprobs.py",
        "                logits = logits / ctx.temperature\n            logits = logits.float()\n",
        "                logits = logits / ctx.temperature\n",
        "NPU422",
        [229, 250, 251],
    ),
    # the causal-LM loss wrapper no longer upcasts its logits parameter
    (
        VEOMNI_MAIN,
        "veomni/ops/kernels/cross_entropy/__init__.py",
        "    if logits is not None:\n        logits = logits.float()\n\n    sp_enabled = get_parallel_state().sp_enabled\n\n"
        "    # veomni sp patch",
        "    sp_enabled = get_parallel_state().sp_enabled\n\n    # veomni sp patch",
        "NPU422",
        [203],
    ),
    # the causal-LM wrapper pads the labels at the front: its `[..., 1:]` removes the pad, nothing is shifted
    (
        VEOMNI_MAIN,
        "veomni/ops/kernels/cross_entropy/__init__.py",
        "labels = nn.functional.pad(labels, (0, 1), value=ignore_index)",
        "labels = nn.functional.pad(labels, (1, 0), value=ignore_index)",
        "NPU412",
        [190],
    ),
    # the chunked loss shifts its labels but no longer cuts the hidden states they are paired with
    (
        VEOMNI_MAIN,
        "veomni/ops/kernels/cross_entropy/chunk_loss.py",
        "        hidden_states = hidden_states[..., :-1, :].contiguous()\n",
        "",
        "NPU412",
        [106],
    ),
    # the logits projected only on the labelled branch of a generated forward: no logits at inference
    (
        VEOMNI_OP,
        "veomni/models_kernel/transformers/qwen3/generated/patched_modeling_qwen3_gpu.py",
        "        else:\n            logits = self.lm_head(hidden_states[:, slice_indices, :])\n",
        "            logits = self.lm_head(hidden_states[:, slice_indices, :])\n",
        "NPU416",
        [541],
    ),
    # the chunked loss's backward no longer scales its precomputed gradients by the incoming gradient
    (
        VEOMNI_MAIN,
        "veomni/ops/kernels/cross_entropy/chunk_loss.py",
        "        if torch.ne(grad_output[0], torch.tensor(1.0, device=grad_output[0].device)):\n"
        "            grad_input = grad_input * grad_output[0]\n            grad_weight = grad_weight * grad_output[0]\n",
        "",
        "NPU421",
        [83],
    ),
    # ... nor does the Triton load-balancing loss's (its gradient is written by a kernel into an output buffer)
    (
        VEOMNI_MAIN,
        "veomni/ops/kernels/load_balancing_loss/triton.py",
        "grad_scale = grad_output * E / (total_weight * total_weight)",
        "grad_scale = E / (total_weight * total_weight)",
        "NPU421",
        [272],
    ),
    # the eager load-balancing kernel: the scale folded into the normaliser, then dropped
    (
        VEOMNI_MAIN,
        "veomni/ops/kernels/load_balancing_loss/eager.py",
        "(num_experts / (total_weight * total_weight))",
        "(1.0 / (total_weight * total_weight))",
        "NPU420",
        [114],
    ),
    # ... the top-k taken over the tokens
    (
        VEOMNI_MAIN,
        "veomni/ops/kernels/load_balancing_loss/eager.py",
        "_, selected = torch.topk(probs, top_k, dim=-1)",
        "_, selected = torch.topk(probs, top_k, dim=0)",
        "NPU420",
        [88],
    ),
    # a GPU generated copy of upstream's load_balancing_loss_func, softmax over the tokens
    (
        VEOMNI_MAIN,
        "veomni/models/transformers/qwen3_moe/generated/patched_modeling_qwen3_moe_gpu.py",
        "routing_weights = torch.nn.functional.softmax(concatenated_gate_logits, dim=-1)",
        "routing_weights = torch.nn.functional.softmax(concatenated_gate_logits, dim=0)",
        "NPU420",
        [676],
    ),
    # the generated router itself normalising over the tokens (upstream: the experts)
    (
        VEOMNI_MAIN,
        "veomni/models/transformers/qwen3_moe/generated/patched_modeling_qwen3_moe_gpu.py",
        "routing_weights = torch.nn.functional.softmax(router_logits, dtype=torch.float, dim=-1)\n        router_top",
        "routing_weights = torch.nn.functional.softmax(router_logits, dtype=torch.float, dim=0)\n        router_top",
        "NPU420",
        [318],
    ),
    # P_e averaged over the experts instead of the tokens: the eager kernel and a generated copy
    (
        VEOMNI_MAIN,
        "veomni/ops/kernels/load_balancing_loss/eager.py",
        "router_prob_sum += probs.sum(dim=0)",
        "router_prob_sum += probs.sum(dim=-1)",
        "NPU420",
        [102],
    ),
    (
        VEOMNI_MAIN,
        "veomni/models/transformers/qwen3_moe/generated/patched_modeling_qwen3_moe_gpu.py",
        "router_prob_per_expert = torch.mean(routing_weights, dim=0)",
        "router_prob_per_expert = torch.mean(routing_weights, dim=-1)",
        "NPU420",
        [687],
    ),
    # token counts that count the ignored labels: num_items_in_batch in the chunked loss, the SP counts of both
    # loss wrappers (through a local, and inline)
    (
        VEOMNI_MAIN,
        "veomni/ops/kernels/cross_entropy/chunk_loss.py",
        "num_items_in_batch = (labels != ignore_index).sum()",
        "num_items_in_batch = labels.numel()",
        "NPU421",
        [130],
    ),
    (
        VEOMNI_MAIN,
        "veomni/ops/kernels/cross_entropy/__init__.py",
        "        num_valid_tokens = (labels != ignore_index).sum()\n        loss = reduce_sequence_parallel_loss(",
        "        num_valid_tokens = labels.numel()\n        loss = reduce_sequence_parallel_loss(",
        "NPU421",
        [219],
    ),
    (
        VEOMNI_MAIN,
        "veomni/ops/kernels/cross_entropy/__init__.py",
        "        num_valid_tokens = (target != ignore_index).sum()\n        loss = reduce_sequence_parallel_loss(loss, num_valid_tokens)",
        "        loss = reduce_sequence_parallel_loss(loss, target.numel())",
        "NPU421",
        [330],
    ),
    # the router indices recorded as router_logits: a spec (upstream router) and a generated file (its own class)
    (
        VEOMNI_MAIN,
        "veomni/models/transformers/gpt_oss/gpt_oss_gpu_patch_gen_config.py",
        "OutputRecorder(GptOssTopKRouter, index=0)",
        "OutputRecorder(GptOssTopKRouter, index=2)",
        "NPU417",
        [102],
    ),
    (
        VEOMNI_OP,
        "veomni/models_kernel/transformers/gpt_oss/generated/patched_modeling_gpt_oss_gpu.py",
        "OutputRecorder(GptOssTopKRouter, index=0)",
        "OutputRecorder(GptOssTopKRouter, index=1)",
        "NPU417",
        [423],
    ),
    # the SP reduction: the token count no longer summed (the summed loss over this rank's count) ...
    (
        VEOMNI_MAIN,
        "veomni/distributed/sequence_parallel/loss.py",
        "        dist.all_reduce(num_valid_tokens, group=group)\n",
        "",
        "NPU421",
        [51],
    ),
    # ... the backward's zero guard dropped (the count comes from the forward's saved tensors)
    (
        VEOMNI_MAIN,
        "veomni/distributed/sequence_parallel/loss.py",
        "grad_output / global_num_tokens.clamp(min=1)",
        "grad_output / global_num_tokens",
        "NPU421",
        [62],
    ),
    # ... the loss no longer weighted by its count before the sum
    (
        VEOMNI_MAIN,
        "veomni/distributed/sequence_parallel/loss.py",
        "        loss *= num_valid_tokens\n",
        "",
        "NPU421",
        [51],
    ),
    # ... the count reduced with a max
    (
        VEOMNI_MAIN,
        "veomni/distributed/sequence_parallel/loss.py",
        "dist.all_reduce(num_valid_tokens, group=group)",
        "dist.all_reduce(num_valid_tokens, op=dist.ReduceOp.MAX, group=group)",
        "NPU421",
        [43],
    ),
    # ... the step's token count reduced with the tree helper's default op (a mean)
    (
        VEOMNI_MAIN,
        "veomni/utils/loss_utils.py",
        'all_reduce((micro_batches_token_len[f"{loss_name}_tokens"].item()), op="sum")',
        'all_reduce((micro_batches_token_len[f"{loss_name}_tokens"].item()))',
        "NPU421",
        [77],
    ),
    # ... the micro-batch token count reduced over the world instead of the SP group
    (
        VEOMNI_MAIN,
        "veomni/utils/loss_utils.py",
        "group=get_parallel_state().sp_group)",
        "group=None)",
        "NPU421",
        [74],
    ),
]


def _lines(rel: str, text: str, code: str) -> list[int]:
    return sorted(d.line for d in lint_source(SourceFile.from_text(rel, text), [code], Settings(), None))


@pytest.mark.parametrize(("tree", "rel", "old", "new", "code", "lines"), SITES, ids=lambda v: str(v)[-40:])
def test_contract_broken_at_another_site(
    tree: str, rel: str, old: str, new: str, code: str, lines: list[int]
) -> None:
    text = (shared_tree(tree) / rel).read_text(encoding="utf-8")
    assert text.count(old) == 1
    assert _lines(rel, text, code) == []
    assert _lines(rel, text.replace(old, new), code) == lines


def _own(rel: str, text: str, code: str) -> list[int]:
    return _lines(rel, textwrap.dedent(text).lstrip("\n"), code)


def test_upcast_after_the_consumer_does_not_count() -> None:
    text = """
    import torch.nn.functional as F


    def per_token_nll(h, w, y):
        scores_logits = h @ w.T
        nll = F.cross_entropy(scores_logits, y, reduction="none")
        scores_logits = scores_logits.float()
        return nll, scores_logits
    """
    # `score` names are not vocabulary logits: quiet; the same code with a vocabulary name is reported
    assert _own("veomni/ops/kernels/x.py", text, "NPU422") == []
    assert _own("veomni/ops/kernels/x.py", text.replace("scores_logits", "vocab_logits"), "NPU422") == [6]


def test_upcast_rule_leaves_upstream_derived_files_alone() -> None:
    text = """
    import torch.nn.functional as F


    def chunk(h, w, y):
        logits = F.linear(h, w)
        return F.cross_entropy(logits, y)
    """
    assert _own("veomni/ops/kernels/cross_entropy/mine.py", text, "NPU422") == [6]
    assert (
        _own("veomni/models/transformers/llama/generated/patched_modeling_llama_gpu.py", text, "NPU422") == []
    )
    assert _own("models/llama/modeling_llama.py", text, "NPU422") == []


def test_moe_block_routing_is_not_a_load_balancing_loss() -> None:
    text = """
    import torch


    class ToySparseMoeBlock(nn.Module):
        def forward(self, hidden_states):
            router_logits = self.gate(hidden_states)
            routing_weights = torch.softmax(router_logits, dim=1, dtype=torch.float)
            weights, selected = torch.topk(routing_weights, self.top_k, dim=-1)
            expert_mask = torch.nn.functional.one_hot(selected, num_classes=self.num_experts)
            return self.experts(hidden_states, expert_mask, weights), router_logits
    """
    assert _own("veomni/models/toy/modeling_toy.py", text, "NPU420") == []


def test_load_balancing_scale_through_a_local_and_a_power() -> None:
    text = """
    import torch


    def switch_aux_loss(router_probs, expert_indices):
        num_experts = router_probs.shape[-1]
        if expert_indices.dtype != torch.int64:
            expert_indices = expert_indices.to(torch.int64)
        expert_mask = torch.nn.functional.one_hot(expert_indices, num_experts)
        _, top = torch.topk(router_probs.softmax(-1), 1, dim=-1)
        tokens = torch.mean(expert_mask.float(), dim=-2)
        probs = torch.mean(router_probs, dim=-2)
        return torch.mean(tokens * probs) * (num_experts**2)
    """
    assert _own("veomni/models/switch/modeling_switch.py", text, "NPU420") == []
    dropped = text.replace(" * (num_experts**2)", "")
    assert _own("veomni/models/switch/modeling_switch.py", dropped, "NPU420") == [12]


def test_fused_head_matches_a_classification_head() -> None:
    text = """
    class ToyForSequenceClassification(ToyPreTrainedModel):
        def forward(self, input_ids=None, labels=None, **kwargs):
            hidden = self.model(input_ids=input_ids, **kwargs).last_hidden_state
            if labels is not None:
                loss, logits, _ = self.loss_function(
                    logits=None, labels=labels, hidden_states=hidden, weights=self.lm_head.weight
                )
            else:
                logits = self.score(hidden)
            return loss, logits
    """
    assert _own("veomni/models/toy/modeling_toy.py", text, "NPU419") == [6]
    assert (
        _own(
            "veomni/models/toy/modeling_toy.py",
            text.replace("self.lm_head.weight", "self.score.weight"),
            "NPU419",
        )
        == []
    )


def test_sp_reduction_guard_by_a_test_after_the_reduction() -> None:
    text = """
    import torch.distributed as dist


    def group_token_mean(loss_sum, tokens, group):
        dist.all_reduce(loss_sum, group=group)
        dist.all_reduce(tokens, group=group)
        if tokens == 0:
            return loss_sum * 0.0
        return loss_sum / tokens
    """
    assert _own("veomni/distributed/x.py", text, "NPU421") == []
    # the same test before the reduction guards only this rank's count
    moved = """
    import torch.distributed as dist


    def group_token_mean(loss_sum, tokens, group):
        if tokens == 0:
            loss_sum = loss_sum * 0.0
        dist.all_reduce(loss_sum, group=group)
        dist.all_reduce(tokens, group=group)
        return loss_sum / tokens
    """
    assert _own("veomni/distributed/x.py", moved, "NPU421") == [9]


def test_kernel_wrapper_hands_its_arguments_to_the_implementation_in_order() -> None:
    """The load-balancing wrapper calls the eager implementation through a module alias of a relative import:
    the implementation's parameters are read from the sibling module on disk (the corpus is only read)."""
    path = shared_tree(VEOMNI_MAIN) / "veomni/ops/kernels/load_balancing_loss/__init__.py"
    text = path.read_text(encoding="utf-8")
    old = "return _load_balancing_loss(gate_logits, num_experts, top_k, attention_mask)"
    assert text.count(old) == 1
    assert _lines(str(path), text, "NPU418") == []
    swapped = text.replace(
        old, "return _load_balancing_loss(gate_logits, top_k, num_experts, attention_mask)"
    )
    assert _lines(str(path), swapped, "NPU418") == [65, 65]
