"""Review fp19: loss, multimodal and RMSNorm rules read the code instead of names or one spelling. Each quiet
variant is paired with a true positive of the same shape that still reports, in other regions of a VeOmni tree."""

from __future__ import annotations

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
