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


_GATHER_421.append(
    (  # a diffusion trainer: an autograd gather of the hidden states vs an all-to-all that hands a shard back
        "veomni/trainer/toy_dit_trainer.py",
        """
        from veomni.distributed.parallel_state import get_parallel_state
        from veomni.distributed.sequence_parallel import reduce_sequence_parallel_loss


        def denoise_loss(self, hidden, target):
            if get_parallel_state().sp_enabled:
                {gather}
            flow_loss, _ = self.flow_loss_fn(self.proj(hidden), target)
            return flow_loss
        """,
        "hidden = gather_heads_scatter_seq(hidden, head_dim=2, seq_dim=1)",
        "hidden = _AllGather.apply(hidden, get_parallel_state().sp_group)",
    )
)


@pytest.mark.parametrize(
    ("path", "text", "gather", "expected"),
    [
        variant
        for path, text, unrelated, related in _GATHER_421
        for variant in ((path, text, unrelated, ["NPU421"]), (path, text, related, []))
    ],
)
def test_npu421_only_a_gather_flowing_into_the_loss_quiets(
    path: str, text: str, gather: str, expected: list[str]
) -> None:
    text = text.replace("{gather}", gather)
    ast.parse(textwrap.dedent(text))  # the variant is code, not a syntax error the linter skips
    assert [d.code for d in lint_snippet(path, text, ["NPU421"])] == expected


# -- NPU703: a zero factor however spelled; a dummy forward run by a helper is followed through the helper's result --
_VL_SPEC = "veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py"
_VL_703 = """
from veomni.distributed.parallel_state import get_parallel_state
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")
{helper}

@config.override_method("Qwen3VLModel.forward")
def vl_forward(self, input_ids=None, pixel_values=None, image_grid_thw=None, **kwargs):
    h = self.get_input_embeddings()(input_ids)
    if pixel_values is not None:
        h = h + self.visual(pixel_values, grid_thw=image_grid_thw).pooler_output.mean()
    elif get_parallel_state().fsdp_enabled:
{dummy}
    return self.language_model(inputs_embeds=h, **kwargs)
"""
_AUDIO_GEN = "veomni/models/transformers/qwen2_audio/generated/patched_modeling_qwen2_audio_npu.py"
_AUDIO_703 = """
# ==============================================================================
#  AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
# ==============================================================================
#
#  Source: transformers.models.qwen2_audio.modeling_qwen2_audio
#  Based on: transformers==5.9.0
#
#  Patches applied:
#    - method_override: Qwen2AudioForConditionalGeneration.forward
#
# ==============================================================================

from veomni.distributed.parallel_state import get_parallel_state


class Qwen2AudioForConditionalGeneration(Qwen2AudioPreTrainedModel):
{helper}
    def forward(self, input_ids=None, input_features=None, feature_attention_mask=None, **kwargs):
        inputs_embeds = self.get_input_embeddings()(input_ids)
        if input_features is not None:
            feats = self.audio_tower(input_features).last_hidden_state
            inputs_embeds = inputs_embeds.masked_scatter(self.audio_mask(input_ids), self.multi_modal_projector(feats))
        elif get_parallel_state().fsdp_enabled:
{dummy}
        return self.language_model(inputs_embeds=inputs_embeds, **kwargs)
"""

# (path, template, helper, dummy body that is right, dummy body that drops the tower, line of the defect)
_CASES_703 = [
    (  # `.mul(0.0)` in a spec
        _VL_SPEC,
        _VL_703,
        "",
        "        fake = self.visual.dummy_forward()\n        h = h + fake.pooler_output.float().mean().mul(0.0).to(h.dtype)",
        "        fake = self.visual.dummy_forward()\n        h = h + fake.pooler_output.float().mean().mul(1.0).to(h.dtype)",
        [13, 14],
    ),
    (  # `torch.mul(x, 0)` / `.mul_(0.0)` in a generated class body
        _AUDIO_GEN,
        _AUDIO_703,
        "",
        "            fake = torch.mul(self.audio_tower.dummy_forward().last_hidden_state.mean(), 0)\n"
        "            inputs_embeds = inputs_embeds + fake",
        "            fake = torch.mul(self.audio_tower.dummy_forward().last_hidden_state.mean(), 2)\n"
        "            inputs_embeds = inputs_embeds + fake",
        [24],
    ),
    (  # a module-level helper of the spec that zeroes the output and returns it
        _VL_SPEC,
        _VL_703,
        "\n\ndef _fake_vision(self):\n    return self.visual.dummy_forward().pooler_output.mean().mul_(0.0)\n\n",
        "        h = h + _fake_vision(self).to(h.dtype)",
        "        _fake_vision(self)",
        [18],
    ),
    (  # a method that returns the raw output: the forward zeroes it
        _AUDIO_GEN,
        _AUDIO_703,
        "    def _audio_dummy(self):\n        return self.audio_tower.dummy_forward()\n\n",
        "            fake = self._audio_dummy().last_hidden_state.mean() * 0.0\n"
        "            inputs_embeds = inputs_embeds + fake",
        "            fake = self._audio_dummy().last_hidden_state.mean()\n"
        "            inputs_embeds = inputs_embeds + fake",
        [27],
    ),
    (  # a method that adds the zero-valued output to the stream it is given and returns the sum
        _AUDIO_GEN,
        _AUDIO_703,
        "    def _with_fake_audio(self, embeds):\n"
        "        fake = self.audio_tower.dummy_forward().last_hidden_state.mean() * 0.0\n"
        "        return embeds + fake\n\n",
        "            inputs_embeds = self._with_fake_audio(inputs_embeds)",
        "            unused = self._with_fake_audio(inputs_embeds)",
        [28],
    ),
]


def _code_703(template: str, helper: str, dummy: str) -> str:
    text = template.replace("{helper}", helper).replace("{dummy}", dummy)
    ast.parse(text)  # a variant is code, never a syntax error the linter skips
    return text


@pytest.mark.parametrize(
    ("path", "template", "helper", "dummy", "expected"),
    [
        variant
        for path, template, helper, good, bad, lines in _CASES_703
        for variant in ((path, template, helper, good, []), (path, template, helper, bad, lines))
    ],
)
def test_npu703_zero_dependency_however_spelled_and_through_helpers(
    path: str, template: str, helper: str, dummy: str, expected: list[int]
) -> None:
    assert _lines(path, _code_703(template, helper, dummy), "NPU703") == expected


# -- NPU431: the eps a norm is built with, read positionally or by keyword against the norm's signature and through
# the locals of the __init__ ---------------------------------------------------------------------------------------
_CASES_431 = [
    (  # a spec override in the VeomniOp tree: q/k norms of Qwen3 attention, eps through a local, positionally
        "veomni/models_kernel/transformers/qwen3/qwen3_gpu_patch_gen_config.py",
        """
        from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm
        from veomni.patchgen import PatchConfig

        config = PatchConfig(source_module="transformers.models.qwen3.modeling_qwen3", target_file="x.py")


        @config.override_method("Qwen3Attention.__init__")
        def qwen3_attention_init_patched(self, config, layer_idx):
            super().__init__()
            self.head_dim = config.head_dim
            norm_eps = {eps}
            self.q_norm = Qwen3RMSNorm(self.head_dim, norm_eps)
            self.k_norm = Qwen3RMSNorm(self.head_dim, eps=norm_eps)
        """,
        "config.rms_norm_eps",
        "1e-5",
        [12, 13],
    ),
    (  # a generated class body: the eps read with getattr into a local, then a chain of locals
        "veomni/models/transformers/llama/generated/patched_modeling_llama_npu.py",
        """
        # Source: transformers.models.llama.modeling_llama
        from torch import nn


        class LlamaDecoderLayer(nn.Module):
            def __init__(self, config, layer_idx):
                super().__init__()
                eps_cfg = {eps}
                eps = eps_cfg
                self.input_layernorm = LlamaRMSNorm(config.hidden_size, eps)
                self.post_attention_layernorm = LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        """,
        'getattr(config, "rms_norm_eps", 1e-6)',
        "config.layer_norm_eps",
        [10],
    ),
    (  # a DeepSeek-V3 MLA norm that upstream builds with the class default: a configured eps passed positionally
        "veomni/models/transformers/deepseek_v3/deepseek_v3_gpu_patch_gen_config.py",
        """
        from veomni.patchgen import PatchConfig

        config = PatchConfig(source_module="transformers.models.deepseek_v3.modeling_deepseek_v3", target_file="x.py")


        @config.override_method("DeepseekV3Attention.__init__")
        def deepseek_v3_attention_init_patched(self, config, layer_idx):
            super().__init__()
            self.kv_lora_rank = config.kv_lora_rank
            kv_eps = {eps}
            self.kv_a_layernorm = DeepseekV3RMSNorm(self.kv_lora_rank, kv_eps)
        """,
        "1e-6",
        "config.rms_norm_eps",
        [11],
    ),
]


_CASES_431.append(
    (  # a norm built with keyword arguments spread from a dict: the eps is not readable, unlike one spelled out
        "veomni/models/transformers/qwen3/generated/patched_modeling_qwen3_gpu.py",
        """
        # Source: transformers.models.qwen3.modeling_qwen3
        from torch import nn


        class Qwen3DecoderLayer(nn.Module):
            def __init__(self, config, layer_idx):
                super().__init__()
                norm_kwargs = {"eps": config.rms_norm_eps}
                self.input_layernorm = Qwen3RMSNorm(config.hidden_size{eps})
                self.post_attention_layernorm = Qwen3RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        """,
        ", **norm_kwargs",
        ", eps=norm_kwargs['eps'] * 10",
        [9],
    )
)


@pytest.mark.parametrize(
    ("path", "text", "eps", "expected"),
    [
        variant
        for path, text, right, wrong, lines in _CASES_431
        for variant in ((path, text, right, []), (path, text, wrong, lines))
    ],
)
def test_npu431_eps_read_through_locals_and_positions(
    path: str, text: str, eps: str, expected: list[int]
) -> None:
    assert _lines(path, text.replace("{eps}", eps), "NPU431") == expected


# -- NPU703: a dummy side output that never reaches the text path is reported where the text-only branch lacks it ---
_SIDE_703 = """
from veomni.distributed.parallel_state import get_parallel_state
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


@config.override_method("Qwen3VLModel.forward")
def vl_forward(self, input_ids=None, pixel_values=None, pixel_values_videos=None, image_grid_thw=None, **kwargs):
    h = self.get_input_embeddings()(input_ids)
    if pixel_values is not None:
        feats = self.get_image_features(pixel_values, image_grid_thw)
        h = h + feats.pooler_output.mean()
        image_side = feats.deepstack_features
    elif get_parallel_state().fsdp_enabled:
        dummy = self.visual.dummy_forward()
        h = h + dummy.pooler_output.mean() * 0.0
        dummy_side = dummy.deepstack_features
    masks, side = None, None
    if pixel_values is not None:
        masks = input_ids == self.config.image_token_id
        side = image_side
    else:
{text_only}
    return self.language_model(inputs_embeds=h, visual_pos_masks=masks, deepstack_visual_embeds=side, **kwargs)
"""


@pytest.mark.parametrize(
    ("text_only", "line"),
    [
        ("        pass", 23),  # the hand-off deleted
        ("        masks = None", 23),  # the branch fills something else
        ("        # the text-only ranks add nothing\n        h = h * 1.0", 24),
    ],
)
def test_npu703_side_output_missing_reported_in_the_text_only_branch(text_only: str, line: int) -> None:
    text = _SIDE_703.replace("{text_only}", text_only)
    ast.parse(text)
    assert _lines(_VL_SPEC, text, "NPU703") == [line]


@pytest.mark.parametrize(
    "text_only",
    ["        side = dummy_side", "        if dummy_side is not None:\n            side = dummy_side"],
)
def test_npu703_side_output_handed_on_quiet(text_only: str) -> None:
    text = _SIDE_703.replace("{text_only}", text_only)
    ast.parse(text)
    assert _lines(_VL_SPEC, text, "NPU703") == []


def test_npu703_side_output_without_a_text_only_branch_reported_at_the_holder() -> None:
    text = _SIDE_703.replace("    else:\n{text_only}\n", "")
    ast.parse(text)
    assert _lines(_VL_SPEC, text, "NPU703") == [17]
