"""Round 12 loss arithmetic (npu_lint/veomni/losspath.py): top-k weights renormalised off their axis (NPU460),
a per-position output of a chunked loss left ungated (NPU461), a loss mapping's terms averaged (NPU462). Each
defect is reported at its line; the correct variants stay quiet."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source


def _lines(code: str, text: str, path: str) -> list[int]:
    src = SourceFile.from_text(path, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, [code], Settings()) if d.code == code)


ROUTER = """
import torch


def router_forward(self, hidden_states):
    probs = torch.softmax(self.gate(hidden_states), dim=-1, dtype=torch.float)
    weights, experts = torch.topk(probs, self.top_k, dim=-1)
    if self.norm_topk_prob:
        weights /= weights.sum(dim=-1, keepdim=True)
    return weights, experts
"""
SPEC = "veomni/models/transformers/toy_moe/toy_moe_gpu_patch_gen_config.py"


def test_topk_renormalised_off_axis() -> None:
    assert _lines("NPU460", ROUTER, SPEC) == []
    out_of_place = ROUTER.replace("weights /= weights.sum(dim=-1", "weights = weights / weights.sum(-1")
    assert _lines("NPU460", out_of_place, SPEC) == []
    assert _lines("NPU460", ROUTER.replace("sum(dim=-1", "sum(dim=0"), SPEC) == [8]
    assert _lines("NPU460", ROUTER.replace("weights.sum(dim=-1, keepdim=True)", "weights.sum()"), SPEC) == [8]
    method = ROUTER.replace("torch.topk(probs, self.top_k, dim=-1)", "probs.topk(self.top_k)")
    assert _lines("NPU460", method, SPEC) == []
    assert _lines("NPU460", method.replace("sum(dim=-1", "sum(dim=0"), SPEC) == [8]


CHUNKED = """
import torch


def distill_forward(ctx, chunks, n, mask_of):
    distill = torch.empty(n)
    entropy = torch.empty(n)
    mass = torch.empty(n)
    log_probs = torch.empty(n)
    for start, end, kl_chunk, ent_chunk, mass_chunk, logits, labels in chunks:
        mask = mask_of(labels)
        zero = torch.zeros_like(kl_chunk)
        log_probs[start:end] = per_token_log_probs(logits, labels, -100)
        distill[start:end] = torch.where(mask, kl_chunk, zero)
        entropy[start:end] = torch.where(mask, ent_chunk, zero)
        mass[start:end] = torch.where(mask, mass_chunk, zero)
    return distill, entropy, mass, log_probs
"""
KERNEL = "veomni/ops/kernels/cross_entropy/chunk_toy_distill.py"


def test_position_output_unmasked() -> None:
    assert _lines("NPU461", CHUNKED, KERNEL) == []
    assert _lines("NPU461", CHUNKED.replace("torch.where(mask, kl_chunk, zero)", "kl_chunk"), KERNEL) == [13]
    assert _lines("NPU461", CHUNKED.replace("torch.where(mask, ent_chunk, zero)", "-ent_chunk"), KERNEL) == [
        14
    ]
    # only one gated sibling: no agreement to judge by
    one = CHUNKED.replace("torch.where(mask, kl_chunk, zero)", "kl_chunk").replace(
        "torch.where(mask, ent_chunk, zero)", "ent_chunk"
    )
    assert _lines("NPU461", one, KERNEL) == []


TERMS = """
import torch


class Trainer:
    def postforward(self, outputs):
        loss_dict = {k: v for k, v in outputs.items() if k.endswith("loss")}
        loss = torch.stack(list(loss_dict.values())).sum()
        return loss, loss_dict
"""


def test_loss_terms_averaged() -> None:
    path = "veomni/trainer/toy_trainer.py"
    assert _lines("NPU462", TERMS, path) == []
    assert _lines("NPU462", TERMS.replace(".sum()", ".mean()"), path) == [7]
    assert _lines(
        "NPU462",
        TERMS.replace(
            "torch.stack(list(loss_dict.values())).sum()", "torch.mean(torch.stack(list(loss_dict.values())))"
        ),
        path,
    ) == [7]
    # micro-batch losses averaged (not named terms) are another matter
    assert (
        _lines("NPU462", TERMS.replace("list(loss_dict.values())).sum()", "micro_losses).mean()"), path) == []
    )


ROW = """
from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss

fused_ce = LigerFusedLinearCrossEntropyLoss(reduction="mean")


def fused_row(logits=None, labels=None, num_items_in_batch=None, ignore_index=-100, **kwargs):
    hidden_states = kwargs.pop("hidden_states")
    weights = kwargs.pop("weights")
    return fused_ce(weights, hidden_states, labels), logits
"""


def test_module_level_summed_loss_object() -> None:
    path = "veomni/ops/kernels/cross_entropy/toy_fused.py"
    assert _lines("NPU440", ROW, path) == []
    summed = ROW.replace('reduction="mean"', 'reduction="sum"')
    assert _lines("NPU440", summed, path) == [3]
    divided = summed.replace(
        "return fused_ce(weights, hidden_states, labels), logits",
        "return fused_ce(weights, hidden_states, labels) / num_items_in_batch, logits",
    )
    assert _lines("NPU440", divided, path) == []
