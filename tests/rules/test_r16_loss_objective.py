"""NPU470-NPU473: training-objective contracts (a detached prediction, a loss term thrown away, the
straight-through estimator's detach, a target consistent with the noising), in any region of a tree."""

from __future__ import annotations

import textwrap

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source


def _found(path: str, text: str, code: str) -> list[int]:
    src = SourceFile.from_text(path, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, [code], Settings()) if d.code == code)


# --- NPU470: a detached prediction fed to a loss -------------------------------------------------------------

DETACHED = [
    (
        "veomni/models/transformers/toy/generated/patched_modeling_toy_npu.py",
        """
        def forward(self, input_ids, labels=None):
            hidden_states = self.model(input_ids).last_hidden_state
            loss, logits, aux = veomni_causal_lm_loss(
                logits=None, labels=labels, hidden_states=hidden_states.detach(), weights=self.lm_head.weight
            )
            return loss
        """,
        4,
    ),
    (
        "veomni/trainer/toy_distill_trainer.py",
        """
        import torch.nn.functional as F
        def train_step(model, batch):
            student_logits = model(**batch).logits
            return F.kl_div(student_logits.detach().float().log_softmax(-1), batch["soft"], reduction="batchmean")
        """,
        4,
    ),
    (
        "veomni/ops/kernels/cross_entropy/toy_chunk.py",
        """
        def chunked_loss(hidden, weight, labels, loss_kernel):
            h = hidden.detach()
            return loss_kernel(h, weight, labels)
        """,
        3,
    ),
    (
        "veomni/models/seed_omni/decoder/toy_head/modeling_toy_head.py",
        """
        import torch.nn.functional as F
        def lm_head(self, hidden_states, labels):
            logits = self.head(hidden_states)
            return F.cross_entropy(logits.detach().view(-1, logits.size(-1)), labels.view(-1))
        """,
        4,
    ),
]


@pytest.mark.parametrize(("path", "text", "line"), DETACHED)
def test_npu470_detached_prediction_reported(path: str, text: str, line: int) -> None:
    assert _found(path, text, "NPU470") == [line]


@pytest.mark.parametrize(
    "body",
    [
        "return F.kl_div(logits.log_softmax(-1), teacher_logits.detach().softmax(-1))",  # a teacher
        "return F.mse_loss(z_q.detach(), z) + 0.25 * F.mse_loss(z_q, z.detach())",  # VQ codebook/commitment
        "return F.mse_loss(pred, target.detach())",  # a target
        "self.log_loss(logits.detach())\n    return F.cross_entropy(logits, labels)",  # logging
        "with torch.no_grad():\n        m = F.cross_entropy(logits.detach(), labels)\n    return m",
    ],
)
def test_npu470_legitimate_detaches_quiet(body: str) -> None:
    text = f"""
import torch
import torch.nn.functional as F
def forward(self, logits, labels, teacher_logits, z, z_q, pred, target):
    {body}
"""
    assert _found("veomni/models/transformers/toy/modeling_toy.py", text, "NPU470") == []


def test_npu470_evaluation_function_quiet() -> None:
    text = """
    import torch.nn.functional as F
    def evaluate(self, logits, labels):
        return F.cross_entropy(logits.detach(), labels)
    """
    assert _found("veomni/trainer/toy.py", text, "NPU470") == []


# --- NPU471: a loss term computed and never read ------------------------------------------------------------

UNREAD = [
    (
        "veomni/models/seed_omni/decoder/toy_edit/modeling_toy_edit.py",
        """
        def lm_head(self, hidden_states, labels=None):
            mse_loss = F.mse_loss(self.gen_head(hidden_states), labels)
            embeds, kl_loss = self.proj_head(hidden_states)
            loss = mse_loss + self.diffusion(embeds)
            return loss
        """,
        3,
    ),
    (
        "veomni/models/transformers/toy_moe/modeling_toy_moe.py",
        """
        def forward(self, x, labels):
            out = self.model(x)
            aux_loss = load_balancing_loss_func(out.router_logits, self.num_experts, self.top_k)
            loss = self.loss_function(out.logits, labels)
            return {"loss": loss}
        """,
        3,
    ),
    (
        "veomni/trainer/toy_vae_trainer.py",
        """
        def step(self, batch):
            recon, posterior = self.vae(batch)
            kl = posterior.kl().mean()
            rec_loss = (recon - batch).abs().mean()
            rec_loss.backward()
            return rec_loss
        """,
        3,
    ),
]


@pytest.mark.parametrize(("path", "text", "line"), UNREAD)
def test_npu471_unread_term_reported(path: str, text: str, line: int) -> None:
    assert _found(path, text, "NPU471") == [line]


@pytest.mark.parametrize(
    "text",
    [
        # the term reaches the loss
        """
        def lm_head(self, h, labels):
            embeds, kl_loss = self.proj_head(h)
            loss = F.mse_loss(embeds, labels) + kl_loss
            return loss
        """,
        # a deliberate discard
        """
        def lm_head(self, h, labels):
            embeds, _kl_loss = self.proj_head(h)
            loss = F.mse_loss(embeds, labels)
            return loss
        """,
        # no loss handed on: a helper that only logs
        """
        def probe(self, h):
            embeds, kl_loss = self.proj_head(h)
            return embeds
        """,
        # a loss callable bound and unused
        """
        def forward(self, h, labels):
            loss_fct = nn.CrossEntropyLoss()
            loss = F.cross_entropy(h, labels)
            return loss
        """,
    ],
)
def test_npu471_quiet(text: str) -> None:
    assert _found("veomni/models/seed_omni/decoder/toy/modeling_toy.py", text, "NPU471") == []


# --- NPU472: straight-through estimator without its detach -------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expr"),
    [
        ("veomni/models/transformers/movq/modeling_movq.py", "z + (z_q - z)"),
        ("veomni/ops/kernels/quant/fake_quant.py", "(w_q - w) + w"),
        ("veomni/models/diffusers/toy_vq/vq.py", "y_hard - y_soft + y_soft"),
        ("veomni/utils/gumbel.py", "h + (codes[idx] - h)"),
    ],
)
def test_npu472_reported(path: str, expr: str) -> None:
    text = f"""
    def quantize(z, z_q, w, w_q, y_hard, y_soft, h, codes, idx):
        out = {expr}
        return out
    """
    assert _found(path, text, "NPU472") == [2]


@pytest.mark.parametrize(
    "expr",
    [
        "z + (z_q - z).detach()",
        "(w_q - w).detach() + w",
        "y_hard - y_soft.detach() + y_soft",
        "self.offset + (length - self.offset)",
        "a + b - c",
        "z_q - z",
        "bias - bias - 10.0 * ones",  # an initialiser's arithmetic, not an estimator: the other term is subtracted
    ],
)
def test_npu472_quiet(expr: str) -> None:
    text = f"""
    def quantize(self, z, z_q, w, w_q, y_hard, y_soft, length, a, b, c, bias, ones):
        out = {expr}
        return out
    """
    assert _found("veomni/models/transformers/movq/modeling_movq.py", text, "NPU472") == []


# --- NPU473: loss target inconsistent with the noising ------------------------------------------------------

REVERSED = [
    (
        "veomni/models/diffusers/toy_dit/modeling_toy_dit.py",
        """
        def training_step(self, latents, t):
            noise = torch.randn_like(latents)
            noisy = (1 - t) * latents + t * noise
            target = latents - noise
            return F.mse_loss(self.dit(noisy, t), target)
        """,
        4,
    ),
    (
        "veomni/models/diffusers/toy_cond/modeling_toy_cond.py",
        """
        def pack(self, latents, timestep):
            eps = torch.randn_like(latents)
            noisy = self.scheduler.scale_noise(eps, timestep, latents)
            training_target = eps - latents
            return noisy, training_target
        """,
        4,
    ),
    (
        "veomni/schedulers/toy_rf.py",
        """
        class RF:
            def add_noise(self, x0, noise, sigma):
                return x0 * (1.0 - sigma) + noise * sigma

            def training_target(self, sample, noise, timestep):
                target = sample - noise
                return target
        """,
        6,
    ),
    (
        "veomni/models/seed_omni/decoder/toy_sd3/modeling_toy_sd3.py",
        """
        def lm_head(self, latents, sigmas):
            noise = torch.randn_like(latents)
            x_t = sigmas * noise + (1.0 - sigmas) * latents
            v = self.transformer(x_t)
            x0 = v * sigmas + x_t
            return F.mse_loss(x0, latents)
        """,
        5,
    ),
    (
        "veomni/data/toy_diffusion_collate.py",
        """
        def loss(unet, clean, t, sched):
            noise = torch.randn_like(clean)
            noisy = sched.add_noise(clean, noise, t)
            noise_pred = unet(noisy, t)
            return F.mse_loss(noise_pred, clean)
        """,
        5,
    ),
]


@pytest.mark.parametrize(("path", "text", "line"), REVERSED)
def test_npu473_reported(path: str, text: str, line: int) -> None:
    assert _found(path, text, "NPU473") == [line]


@pytest.mark.parametrize(
    "text",
    [
        """
        def training_step(self, latents, t):
            noise = torch.randn_like(latents)
            noisy = (1 - t) * latents + t * noise
            target = -(latents - noise)
            return F.mse_loss(self.dit(noisy, t), target)
        """,
        """
        def training_step(self, latents, t):
            noise = torch.randn_like(latents)
            noisy = t * latents + (1 - t) * noise
            target = latents - noise
            return F.mse_loss(self.dit(noisy, t), target)
        """,
        """
        def pack(self, latents, timestep):
            noise = torch.randn_like(latents)
            noisy = self.scheduler.scale_noise(latents, timestep, noise)
            training_target = noise.to(latents.device) - latents
            return noisy, training_target
        """,
        """
        def lm_head(self, latents, sigmas):
            noise = torch.randn_like(latents)
            x_t = sigmas * noise + (1.0 - sigmas) * latents
            x0 = self.transformer(x_t) * (-sigmas) + x_t
            return F.mse_loss(x0, latents)
        """,
        """
        def loss(unet, clean, t, sched):
            noise = torch.randn_like(clean)
            noisy = sched.add_noise(clean, noise, t)
            model_pred = unet(noisy, t)
            return F.mse_loss(model_pred, clean)
        """,
    ],
)
def test_npu473_quiet(text: str) -> None:
    assert _found("veomni/models/diffusers/toy_dit/modeling_toy_dit.py", text, "NPU473") == []


def test_npu471_reported_at_the_total_that_omits_the_term() -> None:
    text = """
    def decode_loss(self, feats, labels):
        rec_loss = F.l1_loss(self.dec(feats), labels)
        z, kld = self.posterior(feats)
        perceptual_loss = self.lpips(z, labels)
        loss = rec_loss + perceptual_loss
        return loss
    """
    assert _found("veomni/models/transformers/toy_vae/modeling_toy_vae.py", text, "NPU471") == [5]
