"""Review fp19: loss, multimodal and RMSNorm rules read the code instead of names or one spelling. Each quiet
variant is paired with a true positive of the same shape that still reports, in other regions of a VeOmni tree."""

from __future__ import annotations

import ast
import textwrap

import pytest

from tests.rules.snippets import lint_snippet


def _lines(path: str, text: str, code: str) -> list[int]:
    return [d.line for d in lint_snippet(path, text, [code])]


# -- NPU471: whether an unread loss-named local is a term is read from what flows into it, not from its name -----
_TERMS_471 = [
    (  # a z-loss named `..._value` is still a term (the name used to quiet it)
        "veomni/trainer/toy_moe_trainer.py",
        """
        def train_step(self, batch):
            out = self.model(**batch)
            z_loss_value = 1e-4 * (out.router_logits.logsumexp(-1) ** 2).mean()
            loss = out.loss
            return loss
        """,
        3,
    ),
    (  # per-token loss weights computed and never applied
        "veomni/models/seed_omni/decoder/toy_speech/modeling_toy_speech.py",
        """
        import torch.nn.functional as F


        def forward(self, hidden_states, labels):
            logits = self.head(hidden_states)
            loss_weights = self.token_weighting(labels)
            loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten())
            return loss
        """,
        6,
    ),
    (  # a balance term of an expert layer named `..._scale`, in the distributed region
        "veomni/distributed/moe/toy_moe_layer.py",
        """
        def routed_loss(self, hidden, router_logits, ce_loss):
            balance_loss_scale = switch_balance(router_logits, self.num_experts)
            total_loss = ce_loss
            return total_loss
        """,
        2,
    ),
    (  # an output read off the model's result named `..._stats`
        "veomni/models/diffusers/toy_vae/modeling_toy_vae.py",
        """
        def training_step(self, batch):
            out = self.vae(batch)
            kl_stats = out.posterior.kl()
            rec_loss = (out.sample - batch).abs().mean()
            return rec_loss
        """,
        3,
    ),
]


@pytest.mark.parametrize(("path", "text", "line"), _TERMS_471)
def test_npu471_term_by_value_reports(path: str, text: str, line: int) -> None:
    assert _lines(path, text, "NPU471") == [line]


_FWD_471 = """
import torch.nn.functional as F
from functools import partial


def compute_loss(self, model, batch, **kwargs):
    {extra}
    out = model(**batch)
    loss = F.cross_entropy(out.logits.flatten(0, 1), batch["labels"].flatten())
    return loss
"""


@pytest.mark.parametrize(
    "extra",
    [
        "loss_mask = batch['labels'] != -100",  # a mask
        "loss_mask = (batch['labels'] != -100).float()",  # a mask, cast
        "loss_mask = batch['labels'].ne(-100) & batch['attention_mask'].bool()",  # masks combined
        "kl_coef = self.args.kl_coef",  # a setting
        "loss_scale = self.loss_scale",  # an attribute of the object, not computed here
        "loss_fn = F.cross_entropy",  # a module function
        "loss_fn = partial(F.cross_entropy, ignore_index=-100)",  # a callable
        "loss_fct = nn.CrossEntropyLoss(reduction='sum')",  # a loss module
        "aux_loss = kwargs.get('aux_loss')",  # an input read out of **kwargs
        "loss_log = f'{batch}'",  # a string
        "loss_hist = [x for x in batch]",  # a container
        "aux_loss = torch.zeros((), device=batch['labels'].device)",  # an accumulator never filled
        "aux_loss, kl = None, None",  # placeholders
    ],
)
def test_npu471_not_a_term_by_value_quiet(extra: str) -> None:
    text = _FWD_471.replace("{extra}", extra)
    ast.parse(text)
    assert _lines("veomni/trainer/toy_trainer.py", text, "NPU471") == []


@pytest.mark.parametrize(
    "extra",
    [
        "loss_mask = self.mask_head(batch['labels'])",  # computed by a module: a weighting dropped
        "aux_loss = kwargs.get('aux_loss') * self.aux_coef",  # an input, scaled: a term
        "aux_loss, kl = self.router_losses(batch)",  # one of a call's results
    ],
)
def test_npu471_term_by_value_same_shape_reports(extra: str) -> None:
    text = _FWD_471.replace("{extra}", extra)
    assert _lines("veomni/trainer/toy_trainer.py", text, "NPU471") != []


# -- NPU421: only a gather whose result flows into the returned loss makes it the whole sequence's -----------------
_GATHER_421 = [
    (  # a chunked loss in the kernels region: the positions are gathered, the hidden states are not
        "veomni/ops/kernels/cross_entropy/chunk_loss.py",
        """
        from ....distributed.parallel_state import get_parallel_state
        from ....distributed.sequence_parallel import gather_outputs, reduce_sequence_parallel_loss


        def chunk_loss_function(hidden_states, weights, labels, position_ids=None, **kwargs):
            sp_enabled = get_parallel_state().sp_enabled
            if sp_enabled:
                {gather}
            chunk_loss = ChunkLoss.apply(hidden_states, weights, labels)
            return chunk_loss, None
        """,
        "position_ids = gather_outputs(position_ids, gather_dim=1, group=get_parallel_state().sp_group)",
        "hidden_states = gather_outputs(hidden_states, gather_dim=1, group=get_parallel_state().sp_group)",
    ),
    (  # a model forward: the router logits are gathered for the aux statistics, the language loss is a shard's
        "veomni/models/transformers/toy_moe/modeling_toy_moe.py",
        """
        from veomni.distributed.parallel_state import get_parallel_state
        from veomni.distributed.sequence_parallel import gather_outputs, reduce_sequence_parallel_loss


        class ToyMoeForCausalLM:
            def forward(self, input_ids, labels=None, **kwargs):
                out = self.model(input_ids)
                hidden, router_logits = out.last_hidden_state, out.router_logits
                if get_parallel_state().sp_enabled:
                    {gather}
                lm_loss, logits = self.loss_function(hidden_states=hidden, weights=self.lm_head.weight, labels=labels)
                return lm_loss, logits, router_logits
        """,
        "router_logits = gather_outputs(router_logits, gather_dim=0, group=get_parallel_state().sp_group)",
        "hidden = torch.cat(gather_outputs(hidden, gather_dim=1, group=get_parallel_state().sp_group), dim=1)",
    ),
    (  # a seed-omni decoder head: an in-place all_gather of token counts for logging vs of the hidden states
        "veomni/models/seed_omni/decoder/toy_audio/modeling_toy_audio.py",
        """
        import torch
        import torch.distributed as dist
        from veomni.distributed.parallel_state import get_parallel_state
        from veomni.distributed.sequence_parallel import reduce_sequence_parallel_loss


        def lm_head_loss(self, hidden, labels):
            parts = [torch.empty_like(hidden) for _ in range(get_parallel_state().sp_size)]
            if get_parallel_state().sp_enabled:
                {gather}
            head_loss, _ = self.loss_fn(hidden, self.head.weight, labels)
            return head_loss
        """,
        "dist.all_gather(parts, labels.ne(-100).sum(), group=get_parallel_state().sp_group)\n"
        "                self.log_tokens(parts)",
        "dist.all_gather(parts, hidden, group=get_parallel_state().sp_group)\n"
        "                hidden = torch.cat(parts, dim=1)",
    ),
]


@pytest.mark.parametrize(("path", "text", "unrelated", "_related"), _GATHER_421)
def test_npu421_gather_of_something_else_reports(path: str, text: str, unrelated: str, _related: str) -> None:
    assert [d.code for d in lint_snippet(path, text.replace("{gather}", unrelated), ["NPU421"])] == ["NPU421"]


@pytest.mark.parametrize(("path", "text", "_unrelated", "related"), _GATHER_421)
def test_npu421_loss_of_gathered_values_quiet(path: str, text: str, _unrelated: str, related: str) -> None:
    text = text.replace("{gather}", related)
    ast.parse(textwrap.dedent(text))  # the variant is code, not a syntax error the linter skips
    assert lint_snippet(path, text, ["NPU421"]) == []
