"""Review rev16b of NPU103, NPU235, NPU402 and NPU470-NPU473: false positives made quiet and misses made to report,
each as its contract in several regions of a tree (models, diffusers, seed_omni, ops kernels, distributed,
trainer, data, utils), with correct code beside it that must stay quiet."""

from __future__ import annotations

import textwrap

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source


def _found(path: str, text: str, code: str) -> list[int]:
    src = SourceFile.from_text(path, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, [code], Settings()) if d.code == code)


# --- NPU103: values the caller only reads on the host ----------------------------------------------------------

HOST_ONLY = [
    (  # a helper's host tensor the caller only reads through `.tolist()`
        "veomni/models/transformers/toy/modeling_toy.py",
        """
        import torch
        from torch import nn


        def _split_sizes(lengths, chunk):
            sizes = torch.tensor([min(chunk, n) for n in lengths], dtype=torch.long)
            return sizes


        class ToyVision(nn.Module):
            def forward(self, pixel_values, lengths):
                sizes = _split_sizes(lengths, self.chunk)
                chunks = torch.split(pixel_values, sizes.tolist())
                return torch.cat([self.block(c) for c in chunks])
        """,
    ),
    (  # the same in a kernel's eager code, read through `.item()` and `.shape`
        "veomni/ops/kernels/toy_moe/eager.py",
        """
        import torch
        from torch import nn


        def _expert_total(counts):
            return torch.tensor([sum(counts), len(counts)])


        class ToyDispatch(nn.Module):
            def forward(self, hidden_states, counts):
                total = _expert_total(counts)
                rows = total.item()
                width = total.shape
                return self.experts(hidden_states[:rows]), width
        """,
    ),
    (  # a seed_omni decoder: the helper's result read on the host in the call itself
        "veomni/models/seed_omni/decoder/toy_dec/modeling_toy_dec.py",
        """
        import torch
        from torch import nn


        def _frame_table(frames):
            return torch.arange(frames)


        class ToyDecoder(nn.Module):
            def forward(self, latents, frames):
                ids = _frame_table(frames).tolist()
                return [self.proj(latents[i]) for i in ids]
        """,
    ),
    (  # a host offsets buffer filled from a helper's `.cpu()` copy and returned as `.tolist()`
        "veomni/models/transformers/toy/modeling_toy.py",
        """
        import torch
        from torch import nn


        def _host_lengths(attention_mask):
            return attention_mask.sum(-1).cpu()


        class ToyLM(nn.Module):
            def forward(self, hidden_states, attention_mask):
                lens = _host_lengths(attention_mask)
                max_len = int(lens.max())
                offsets = torch.zeros(len(lens) + 1, dtype=torch.long)
                offsets[1:] = lens.cumsum(0)
                return hidden_states[:, :max_len], offsets.tolist()
        """,
    ),
    (  # the same in distributed code: a helper handing back `.tolist()` of a host copy
        "veomni/distributed/toy_split.py",
        """
        import torch


        def _local_counts(attention_mask):
            return attention_mask.sum(0).to("cpu")


        def split_sizes(attention_mask, world):
            counts = _local_counts(attention_mask)
            table = torch.zeros(world, dtype=torch.long)
            table[: counts.numel()] = counts
            return table.tolist()
        """,
    ),
    (  # a deliberate CPU generator: reproducible noise drawn on the host, samples moved to the data's device
        "veomni/models/transformers/toy/modeling_toy.py",
        """
        import torch
        from torch import nn


        class ToyNoise(nn.Module):
            def forward(self, latents, seed):
                g = torch.Generator().manual_seed(seed)
                noise = torch.randn(latents.shape, generator=g, dtype=latents.dtype).to(latents.device)
                return latents + noise
        """,
    ),
    (  # the same in a diffusers training step, seeded separately, drawn with device="cpu"
        "veomni/models/diffusers/toy_dit/modeling_toy_dit.py",
        """
        import torch
        from torch import nn


        class ToyDiT(nn.Module):
            def forward(self, latents, seed):
                gen = torch.Generator()
                gen.manual_seed(seed)
                eps = torch.randn(latents.shape, generator=gen, device="cpu").to(latents.device)
                return self.block(latents + eps)
        """,
    ),
    (  # and in a trainer helper that draws timesteps on the host
        "veomni/trainer/toy_dit_trainer.py",
        """
        import torch


        def sample_timesteps(batch, seed):
            rng = torch.Generator().manual_seed(seed)
            t = torch.rand(batch["latents"].shape[0], generator=rng)
            return t.to(batch["latents"].device)
        """,
    ),
]


DEVICE_USE = [
    (  # the helper's host tensor meets the forward's data through a submodule
        "veomni/models/transformers/toy/modeling_toy.py",
        """
        import torch
        from torch import nn


        def _make_positions(n):
            return torch.arange(n)


        class ToyBlock(nn.Module):
            def forward(self, hidden_states):
                pos = _make_positions(hidden_states.shape[1])
                return hidden_states + self.pos_emb(pos)
        """,
        6,
    ),
    (  # read once on the host and once on the device: still a device use
        "veomni/ops/kernels/toy_moe/eager.py",
        """
        import torch
        from torch import nn


        def _expert_ids(n):
            return torch.arange(n)


        class ToyDispatch(nn.Module):
            def forward(self, hidden_states, n):
                ids = _expert_ids(n)
                rows = ids.tolist()
                return self.experts(hidden_states, ids), rows
        """,
        6,
    ),
    (  # a helper that returns a device value through its `.cpu()` branch only on one path is not host-returning
        "veomni/models/transformers/toy/modeling_toy.py",
        """
        import torch
        from torch import nn


        def _lengths(mask, host):
            if host:
                return mask.sum(-1).cpu()
            return mask.sum(-1)


        class ToyLM(nn.Module):
            def forward(self, hidden_states, attention_mask):
                lens = _lengths(attention_mask, False)
                offsets = torch.zeros(len(lens) + 1, dtype=torch.long)
                offsets[1:] = lens.cumsum(0)
                return hidden_states, offsets
        """,
        14,
    ),
    (  # a CPU generator handed to a draw on the accelerator
        "veomni/models/diffusers/toy_dit/modeling_toy_dit.py",
        """
        import torch
        from torch import nn


        class ToyDiT(nn.Module):
            def forward(self, latents, seed):
                g = torch.Generator().manual_seed(seed)
                noise = torch.randn(latents.shape, generator=g, device=latents.device)
                return latents + noise
        """,
        7,
    ),
    (  # a CPU generator handed on to code that may draw anywhere
        "veomni/models/transformers/toy/modeling_toy.py",
        """
        import torch
        from torch import nn


        class ToyNoise(nn.Module):
            def forward(self, latents, seed):
                g = torch.Generator()
                return self.sampler(latents, generator=g)
        """,
        7,
    ),
]


@pytest.mark.parametrize(("path", "text", "line"), DEVICE_USE)
def test_npu103_device_uses_still_report(path: str, text: str, line: int) -> None:
    assert line in _found(path, text, "NPU103")


# --- NPU235: a method that binds a module global locally ----------------------------------------------------

METHOD_SETTERS = [
    (
        "veomni/utils/toy_installer.py",
        """
        _ATTN_IMPL = "eager"


        class Installer:
            def install(self, impl):
                _ATTN_IMPL = impl


        def attn_impl():
            return _ATTN_IMPL
        """,
        6,
    ),
    (
        "veomni/ops/kernels/toy_registry.py",
        """
        _TABLE = {}


        class KernelLoader:
            @classmethod
            def load(cls, entries):
                _TABLE = dict(entries)
                print("loaded", len(entries))


        def kernel(name):
            return _TABLE[name]
        """,
        7,
    ),
    (
        "veomni/distributed/toy_state.py",
        """
        _GROUP = None


        class GroupManager:
            def setup(self, ranks):
                group = tuple(ranks)
                _GROUP = group


        def get_group():
            return _GROUP
        """,
        7,
    ),
    (
        "veomni/models/transformers/toy/__init__.py",
        """
        _REGISTERED = False


        class Registrar:
            async def register(self):
                _REGISTERED = True


        def is_registered():
            return _REGISTERED
        """,
        6,
    ),
]


METHOD_SETTERS += [
    (  # silencing the unused-local warning does not make the assignment reach the module (dev round 15)
        "veomni/distributed/toy_world.py",
        """
        _world = None


        class Config:
            def reset(self):
                _world = None  # noqa: F841
                self.size = 1


        def world():
            return _world
        """,
        6,
    ),
    (
        "veomni/ops/config/toy_singleton.py",
        """
        _cfg = None


        def set_cfg(cfg):
            _cfg = cfg  # noqa: F841


        def get_cfg():
            return _cfg
        """,
        5,
    ),
]


METHOD_QUIET = [
    (  # the method declares the global
        "veomni/utils/toy_installer.py",
        """
        _ATTN_IMPL = "eager"


        class Installer:
            def install(self, impl):
                global _ATTN_IMPL
                _ATTN_IMPL = impl


        def attn_impl():
            return _ATTN_IMPL
        """,
    ),
    (  # a local that shadows the module name and is read
        "veomni/ops/kernels/toy_registry.py",
        """
        _TABLE = {}


        class KernelLoader:
            def load(self, entries):
                _TABLE = dict(entries)
                return _TABLE


        def kernel(name):
            return _TABLE[name]
        """,
    ),
    (  # a class attribute (class body, not a method) of the same name
        "veomni/distributed/toy_state.py",
        """
        _GROUP = None


        class GroupManager:
            _GROUP = "default"

            def setup(self, ranks):
                self._GROUP = tuple(ranks)


        def get_group():
            return _GROUP
        """,
    ),
    (  # a function nested in a method: its names may be meant for the enclosing scope
        "veomni/trainer/toy_trainer.py",
        """
        _STEP = 0


        class Trainer:
            def fit(self):
                def bump():
                    _STEP = 1
                bump()


        def step():
            return _STEP
        """,
    ),
]


# --- NPU402: the offset expanded into a sum ---------------------------------------------------------------------

_ZERO_NORM = """
import torch
from torch import nn


class ToyGemmaRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float())
{body}
        return output.type_as(x)
"""

EXPANDED = [
    (
        "veomni/models/transformers/toy/modeling_toy.py",
        "        output = output + output * self.weight.float()",
    ),
    (
        "veomni/models/diffusers/toy_dit/modeling_toy_dit.py",
        "        output = output * self.weight.float() + output",
    ),
    (
        "veomni/models/transformers/toy_b/generated/patched_modeling_toy_b_gpu.py",
        "        output = self.weight.float() * output + output",
    ),
    (
        "veomni/models/seed_omni/encoder/toy_enc/modeling_toy_enc.py",
        "        output = output + self.weight * output",
    ),
]


DROPPED = [
    ("veomni/models/transformers/toy/modeling_toy.py", "        output = output * self.weight.float()"),
    # the sum adds something other than the multiplicand: not `x * (1 + w)`
    (
        "veomni/models/diffusers/toy_dit/modeling_toy_dit.py",
        "        output = output * self.weight.float() + x",
    ),
    (
        "veomni/models/seed_omni/encoder/toy_enc/modeling_toy_enc.py",
        "        output = x.float() + output * self.weight",
    ),
]


@pytest.mark.parametrize(
    ("path", "body", "lines"), [*((p, b, []) for p, b in EXPANDED), *((p, b, [16]) for p, b in DROPPED)]
)
def test_npu402_expanded_offset_is_the_offset_raw_weight_reports(
    path: str, body: str, lines: list[int]
) -> None:
    assert _found(path, _ZERO_NORM.format(body=body), "NPU402") == lines


# --- NPU470: a detached local read through views ---------------------------------------------------------------

DETACHED_LOCALS = [
    (
        "veomni/models/transformers/toy/modeling_toy.py",
        """
        import torch.nn.functional as F
        from torch import nn


        class ToyLM(nn.Module):
            def forward(self, input_ids, labels):
                hidden_states = self.model(input_ids).last_hidden_state
                logits = self.lm_head(hidden_states).detach()
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1))
                return loss
        """,
        9,
    ),
    (
        "veomni/models/seed_omni/decoder/toy_head/modeling_toy_head.py",
        """
        import torch.nn.functional as F


        def lm_head(self, hidden_states, labels):
            scores = self.head(hidden_states).detach()
            return F.cross_entropy(scores, labels)
        """,
        6,
    ),
    (
        "veomni/trainer/toy_dpo_trainer.py",
        """
        import torch.nn.functional as F


        def train_step(model, batch):
            pred = model(**batch).logits.float().detach()
            return F.mse_loss(pred.float().flatten(0, 1), batch["target"])
        """,
        6,
    ),
    (
        "veomni/ops/kernels/cross_entropy/toy_chunk.py",
        """
        import torch.nn.functional as F


        def chunk_loss(hidden, weight, labels):
            logits = (hidden @ weight.t()).detach()
            return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), labels.reshape(-1))
        """,
        6,
    ),
]


DETACH_QUIET = [
    (  # a detached teacher / target local
        "veomni/trainer/toy_distill_trainer.py",
        """
        import torch.nn.functional as F


        def train_step(model, teacher, batch):
            student_logits = model(**batch).logits
            teacher_logits = teacher(**batch).logits.detach()
            return F.kl_div(student_logits.log_softmax(-1), teacher_logits.view(-1).softmax(-1))
        """,
    ),
    (  # metrics computed on a detached copy in an evaluation function
        "veomni/models/transformers/toy/modeling_toy.py",
        """
        import torch.nn.functional as F


        def evaluate(self, hidden_states, labels):
            logits = self.lm_head(hidden_states).detach()
            return F.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1))
        """,
    ),
    (  # a detached value that is not the loss's first (prediction) argument
        "veomni/ops/kernels/cross_entropy/toy_chunk.py",
        """
        import torch.nn.functional as F


        def chunk_loss(hidden, weight, labels):
            logits = hidden @ weight.t()
            weights = labels.float().detach()
            return F.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1), weight=weights)
        """,
    ),
]


# --- NPU471: an inline-arithmetic term never added ------------------------------------------------------------

INLINE_TERMS = [
    (
        "veomni/models/transformers/toy/modeling_toy.py",
        """
        import torch.nn.functional as F


        def forward(self, x):
            mu, logvar, recon = self.encode_decode(x)
            recon_loss = F.mse_loss(recon, x)
            kld = -0.5 * (1 + logvar - mu**2 - logvar.exp()).mean()
            return recon_loss
        """,
        7,
    ),
    (
        "veomni/models/diffusers/toy_vae/modeling_toy_vae.py",
        """
        def training_step(self, batch):
            posterior, rec = self.vae(batch)
            rec_loss = (rec - batch).abs().mean()
            kl_loss = 0.5 * (posterior.mean**2 + posterior.var - posterior.logvar - 1).sum()
            return rec_loss
        """,
        4,
    ),
    (
        "veomni/models/seed_omni/encoder/toy_vq/modeling_toy_vq.py",
        """
        def quantize(self, z, codes):
            codebook_loss = self.mse(codes, z.detach())
            commitment = 0.25 * ((codes.detach() - z) ** 2).mean()
            return codes, codebook_loss
        """,
        3,
    ),
    (
        "veomni/trainer/toy_moe_trainer.py",
        """
        def train_step(model, batch):
            out = model(**batch)
            z_loss = 1e-4 * (out.router_logits.logsumexp(-1) ** 2).mean()
            loss = out.loss
            return loss
        """,
        3,
    ),
]


TERM_QUIET = [
    (  # the inline term is added
        "veomni/models/transformers/toy/modeling_toy.py",
        """
        import torch.nn.functional as F


        def forward(self, x):
            mu, logvar, recon = self.encode_decode(x)
            recon_loss = F.mse_loss(recon, x)
            kld = -0.5 * (1 + logvar - mu**2 - logvar.exp()).mean()
            return recon_loss + self.beta * kld
        """,
    ),
    (  # a sum of loss terms stored and dropped is NPU425's, not this rule's
        "veomni/trainer/toy_moe_trainer.py",
        """
        def train_step(model, batch):
            out = model(**batch)
            aux_loss = out.aux_loss
            total_loss = out.loss + 0.01 * aux_loss
            return aux_loss
        """,
    ),
    (  # a discarded inline term named with a leading underscore
        "veomni/models/diffusers/toy_vae/modeling_toy_vae.py",
        """
        def training_step(self, batch):
            posterior, rec = self.vae(batch)
            rec_loss = (rec - batch).abs().mean()
            _kl_loss = 0.5 * (posterior.mean**2 + posterior.var - posterior.logvar - 1).sum()
            return rec_loss
        """,
    ),
]


# --- NPU473: an inline target, a DDPM noise prediction onto x0 ---------------------------------------------------

NOISING_FAULTS = [
    (  # the target written inline in the loss call
        "veomni/models/diffusers/toy_dit/modeling_toy_dit.py",
        """
        import torch
        import torch.nn.functional as F


        def fm_step(self, latents, sigmas):
            noise = torch.randn_like(latents)
            noisy = self.scheduler.scale_noise(latents, sigmas, noise)
            pred = self.transformer(noisy, sigmas)
            loss = F.mse_loss(pred, latents - noise)
            return loss
        """,
        9,
    ),
    (  # inline, `target=` keyword, in a trainer with a hand-written interpolation
        "veomni/trainer/toy_flow_trainer.py",
        """
        import torch


        def train_step(model, x0, t, loss_fn):
            eps = torch.randn_like(x0)
            x_t = (1 - t) * x0 + t * eps
            v = model(x_t, t)
            return loss_fn.smooth_l1_loss(v, target=x0.float() - eps)
        """,
        8,
    ),
    (  # DDPM: the noise prediction regressed onto the clean sample
        "veomni/models/diffusers/toy_unet/modeling_toy_unet.py",
        """
        import torch
        import torch.nn.functional as F


        def ddpm_step(self, x0, t):
            noise = torch.randn_like(x0)
            a = self.alphas_cumprod[t].view(-1, 1, 1, 1)
            x_t = a.sqrt() * x0 + (1 - a).sqrt() * noise
            noise_pred = self.unet(x_t, t)
            return F.mse_loss(noise_pred, x0)
        """,
        10,
    ),
    (  # DDPM with precomputed coefficients, in a seed_omni decoder
        "veomni/models/seed_omni/decoder/toy_diff/modeling_toy_diff.py",
        """
        import torch


        class ToyDiffusionHead:
            def loss(self, latents, t):
                z = torch.randn(latents.shape, device=latents.device)
                noisy = self.sqrt_abar[t] * latents + self.sqrt_one_minus_abar[t] * z
                eps_hat = self.net(noisy, t)
                return self.mse_loss(eps_hat, latents)
        """,
        9,
    ),
]


NOISING_QUIET = [
    (  # the velocity inline
        "veomni/models/diffusers/toy_dit/modeling_toy_dit.py",
        """
        import torch
        import torch.nn.functional as F


        def fm_step(self, latents, sigmas):
            noise = torch.randn_like(latents)
            noisy = self.scheduler.scale_noise(latents, sigmas, noise)
            pred = self.transformer(noisy, sigmas)
            return F.mse_loss(pred, noise - latents)
        """,
    ),
    (  # data at s = 1 (rectified flow): `x0 - noise` is the velocity there
        "veomni/trainer/toy_flow_trainer.py",
        """
        import torch
        import torch.nn.functional as F


        def rf_step(model, x0, t):
            noise = torch.randn_like(x0)
            x_t = t * x0 + (1 - t) * noise
            return F.mse_loss(model(x_t, t), x0 - noise)
        """,
    ),
    (  # DDPM epsilon prediction onto the noise, and v-prediction
        "veomni/models/diffusers/toy_unet/modeling_toy_unet.py",
        """
        import torch
        import torch.nn.functional as F


        def ddpm_step(self, x0, t):
            noise = torch.randn_like(x0)
            a = self.alphas_cumprod[t].view(-1, 1, 1, 1)
            x_t = a.sqrt() * x0 + (1 - a).sqrt() * noise
            noise_pred = self.unet(x_t, t)
            return F.mse_loss(noise_pred, noise)


        def vpred_step(self, x0, t):
            noise = torch.randn_like(x0)
            a = self.alphas_cumprod[t].view(-1, 1, 1, 1)
            x_t = a.sqrt() * x0 + (1 - a).sqrt() * noise
            target = a.sqrt() * noise - (1 - a).sqrt() * x0
            return F.mse_loss(self.unet(x_t, t), target)
        """,
    ),
    (  # a mix of two non-random operands is no noising (feature blending)
        "veomni/models/seed_omni/decoder/toy_diff/modeling_toy_diff.py",
        """
        class ToyBlend:
            def loss(self, a, b, w):
                mixed = w * a + (2 - w) * b
                noise_pred = self.net(mixed)
                return self.mse_loss(noise_pred, a)
        """,
    ),
]


def test_npu473_precheck_skips_files_without_noising() -> None:
    from npu_lint.core.astutil import parse_snippet
    from npu_lint.veomni import noising

    assert not noising.may_noise(
        parse_snippet("def f(x, y):\n    target = x - y\n    return loss(x, target)\n")
    )
    assert noising.may_noise(parse_snippet("def f(x, s):\n    return (1 - s) * x\n"))
    assert noising.may_noise(parse_snippet("def f(x):\n    return torch.randn_like(x)\n"))


# --- NPU103: host metadata in a dict, read by how it is consumed (not by its key's name) ---------------------

DICT_FIELDS_QUIET = [
    (  # the injections' control: ViT metadata precomputed on the host and handed to the module's own forward
        "veomni/models/transformers/toy_vl/generated/patched_modeling_toy_vl_npu.py",
        """
        import torch
        from torch import nn


        class ToyVisionModel(nn.Module):
            def dummy_forward(self):
                pixel_values = torch.zeros((16, 8), dtype=self.dtype, device=self.device)
                cu = [0, 16]
                vit_metadata = {
                    "grid_thw_list": [[1, 4, 4]],
                    "cu_seqlens": torch.tensor(cu, dtype=torch.int32),
                    "max_seqlen": 16,
                }
                return self(hidden_states=pixel_values, vit_metadata=vit_metadata)
        """,
    ),
    (  # a key no name list knows, handed inline to a submodule
        "veomni/models/diffusers/toy_dit/modeling_toy_dit.py",
        """
        import torch
        from torch import nn


        class ToyDiT(nn.Module):
            def forward(self, latents, frames):
                return self.blocks(latents, extra={"frame_table": torch.arange(frames)})
        """,
    ),
    (  # an ops kernel adapter handing host boundaries to the fused op's module wrapper
        "veomni/ops/kernels/toy_attn/adapter.py",
        """
        import torch
        from torch import nn


        class ToyVarlenAttention(nn.Module):
            def forward(self, q, k, v, bounds):
                meta = {"bounds_host": torch.tensor(bounds, dtype=torch.int64)}
                return self.kernel(q, k, v, meta=meta)
        """,
    ),
]


DICT_FIELDS_USED = [
    (  # the field read back and combined with device data in the same function
        "veomni/models/transformers/toy/modeling_toy.py",
        """
        import torch
        from torch import nn


        class ToyLM(nn.Module):
            def forward(self, hidden_states, n):
                meta = {"cu_seqlens": torch.arange(n)}
                return hidden_states + meta["cu_seqlens"]
        """,
        7,
    ),
    (  # a tensor (not a dict field) handed to a submodule still meets it
        "veomni/models/diffusers/toy_dit/modeling_toy_dit.py",
        """
        import torch
        from torch import nn


        class ToyDiT(nn.Module):
            def forward(self, latents, frames):
                return self.blocks(latents, torch.arange(frames))
        """,
        7,
    ),
]


# --- every table above: each fault reported at its line, each correct variant quiet -------------------------------

_REPORTED = [
    ("NPU235", METHOD_SETTERS),
    ("NPU470", DETACHED_LOCALS),
    ("NPU471", INLINE_TERMS),
    ("NPU473", NOISING_FAULTS),
    ("NPU103", DICT_FIELDS_USED),
]
_QUIET = [
    ("NPU103", HOST_ONLY),
    ("NPU235", METHOD_QUIET),
    ("NPU470", DETACH_QUIET),
    ("NPU471", TERM_QUIET),
    ("NPU473", NOISING_QUIET),
    ("NPU103", DICT_FIELDS_QUIET),
]


@pytest.mark.parametrize(
    ("code", "path", "text", "lines"),
    [
        *((code, path, text, [line]) for code, cases in _REPORTED for path, text, line in cases),
        *((code, path, text, []) for code, cases in _QUIET for path, text in cases),
    ],
)
def test_reported_at_its_line_or_quiet(code: str, path: str, text: str, lines: list[int]) -> None:
    assert _found(path, text, code) == lines
