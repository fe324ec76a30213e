"""NPU703: a value a dummy forward produces for a modality must reach the text path (or the consumer the real media
path feeds). A dummy value read only by its own presence test (`x is not None`, `if x:`, `len(x)`), or bound again
before it is read, is lost: the layers producing it get no gradient on text-only ranks. Each shape is written in
other models, layouts (spec, generated GPU / NPU file) and names than the dev case, with correct variants that
must stay quiet."""

from __future__ import annotations

import ast

import pytest

from tests.rules.snippets import GLM4V_VIDEO_HEAD, lint_snippet


def _lines(path: str, text: str) -> list[int]:
    """The lines NPU703 reports, counted from the template's first line (its leading newline dropped)."""
    ast.parse(text)  # a variant is code, never a syntax error the linter skips
    return [d.line for d in lint_snippet(path, text, ["NPU703"])]


# A generated NPU file of an audio model: the audio tower's side output (per-layer features) feeds the decoder.
_AUDIO_GEN = "veomni/models/transformers/qwen2_audio/generated/patched_modeling_qwen2_audio_npu.py"
_AUDIO = """
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
    def forward(self, input_ids=None, input_features=None, feature_attention_mask=None, **kwargs):
        inputs_embeds = self.get_input_embeddings()(input_ids)
        dummy_layers = None
        if input_features is not None:
            audio_out = self.audio_tower(input_features)
            inputs_embeds = inputs_embeds.masked_scatter(self.audio_mask(input_ids), audio_out.last_hidden_state)
            real_layers = audio_out.layer_features
        elif get_parallel_state().fsdp_enabled:
            probe = self.audio_tower.dummy_forward()
            inputs_embeds = inputs_embeds + probe.last_hidden_state.mean() * 0.0
            dummy_layers = probe.layer_features
        if input_features is not None:
            layer_feed = real_layers
        else:
{text_only}
        return self.language_model(inputs_embeds=inputs_embeds, layer_feed=layer_feed, **kwargs)
"""

# A spec of a video-language model, module-level patch function, with other names for the side output.
_VIDEO_SPEC = "veomni/models/transformers/glm4v/glm4v_gpu_patch_gen_config.py"
_VIDEO = (
    GLM4V_VIDEO_HEAD
    + """        placeholder_feats = ghost.multiscale_features
{middle}
    if pixel_values_videos is not None:
        routed = stack_feats
    else:
{text_only}
{after}
    return self.language_model(inputs_embeds=embeds, multiscale=routed, **kwargs)
"""
)


def _video(text_only: str, middle: str = "", after: str = "") -> str:
    return _VIDEO.replace("{text_only}", text_only).replace("{middle}\n", middle).replace("{after}\n", after)


@pytest.mark.parametrize(
    ("text_only", "line"),
    [
        # the dev shape in another model and layout: the hand-off assigns None under the presence test
        ("            if dummy_layers is not None:\n                layer_feed = None", 32),
        # the presence test of a truthiness kind, the value only logged by size
        (
            "            layer_feed = None\n            if dummy_layers:\n                print(len(dummy_layers))",
            31,
        ),
    ],
)
def test_generated_audio_side_output_only_tested_is_reported(text_only: str, line: int) -> None:
    assert _lines(_AUDIO_GEN, _AUDIO.replace("{text_only}", text_only)) == [line]


@pytest.mark.parametrize(
    "text_only",
    [
        "            layer_feed = dummy_layers",
        "            if dummy_layers is not None:\n                layer_feed = dummy_layers",
        "            layer_feed = dummy_layers if dummy_layers is not None else None",
        "            layer_feed = [t * 1.0 for t in dummy_layers] if dummy_layers else None",
    ],
)
def test_generated_audio_side_output_handed_on_is_quiet(text_only: str) -> None:
    assert _lines(_AUDIO_GEN, _AUDIO.replace("{text_only}", text_only)) == []


def test_spec_side_output_copied_then_overwritten_is_reported_at_the_rebinding() -> None:
    # the copy happens, but an assignment that always runs afterwards binds the name again before the decoder reads it
    text = _video("        routed = placeholder_feats", after="    routed = None\n")
    assert _lines(_VIDEO_SPEC, text) == [23]
    # the holder itself bound again (unconditionally) before its hand-off
    held = _video("        routed = placeholder_feats", middle="    placeholder_feats = None\n")
    assert _lines(_VIDEO_SPEC, held) == [19]


def test_spec_side_output_rebinding_that_keeps_the_value_is_quiet() -> None:
    assert _lines(_VIDEO_SPEC, _video("        routed = placeholder_feats")) == []
    # a rebinding that reads the value it replaces carries it on
    keeps = _video(
        "        routed = placeholder_feats", after="    routed = [f.to(embeds.dtype) for f in routed]\n"
    )
    assert _lines(_VIDEO_SPEC, keeps) == []
    # a rebinding only on another branch (the ranks with video) leaves the text-only hand-off alone
    other_branch = _video(
        "        routed = placeholder_feats",
        after="    if pixel_values_videos is not None and self.training:\n        routed = list(routed)\n",
    )
    assert _lines(_VIDEO_SPEC, other_branch) == []
    # the holder bound again only on the branch with video (exclusive with the dummy pass)
    exclusive = _video(
        "        routed = placeholder_feats",
        middle="    if pixel_values_videos is not None:\n        placeholder_feats = None\n",
    )
    assert _lines(_VIDEO_SPEC, exclusive) == []


def test_spec_side_output_only_tested_is_reported_at_the_text_only_reset() -> None:
    text = _video("        routed = None\n        if placeholder_feats is not None:\n            pass")
    assert _lines(_VIDEO_SPEC, text) == [22]


def test_zero_term_sum_overwritten_before_the_decoder_reads_it() -> None:
    # the stream holding the zero-valued term is rebuilt from the token ids before the decoder reads it
    text = _video(
        "        routed = placeholder_feats", after="    embeds = self.get_input_embeddings()(input_ids)\n"
    )
    assert _lines(_VIDEO_SPEC, text) == [16]  # the dummy forward whose zero term never reaches the text path
    # in the generated audio file: the sum is stored in a scratch local, then the scratch local is replaced
    audio = _AUDIO.replace("{text_only}", "            layer_feed = dummy_layers").replace(
        "            inputs_embeds = inputs_embeds + probe.last_hidden_state.mean() * 0.0\n",
        "            mixed = inputs_embeds + probe.last_hidden_state.mean() * 0.0\n"
        "            mixed = inputs_embeds\n"
        "            inputs_embeds = mixed\n",
    )
    # (the fallback check also reports the stream set without running the tower, at line 28)
    assert _lines(_AUDIO_GEN, audio) == [25, 28]


def test_zero_term_sum_rebuilt_only_elsewhere_is_quiet() -> None:
    # rebuilt only under another condition, or by a rebinding that reads the stream: the term stays in
    for after in (
        "    if kwargs.get('reembed'):\n        embeds = self.get_input_embeddings()(input_ids)\n",
        "    embeds = embeds.to(self.dtype)\n",
    ):
        assert _lines(_VIDEO_SPEC, _video("        routed = placeholder_feats", after=after)) == [], after


# An in-tree omni model (Seed-Omni layout): the encoder's dummy pass result must reach the text stream times zero.
_OMNI = "veomni/models/seed_omni/modeling_toy_omni.py"
_OMNI_TEXT = """
import torch


class ToyOmniModel(torch.nn.Module):
    def embed(self, inputs_embeds, audio_features=None):
        if audio_features is not None:
            inputs_embeds = inputs_embeds + self.audio_encoder.lm_encode(audio_features)
        elif self.training:
            placeholder = self.audio_encoder.lm_dummy_encode()
{use}
        return inputs_embeds
"""


@pytest.mark.parametrize(
    "use",
    [
        "            if placeholder is not None:\n                pass",
        "            assert placeholder.shape[-1] == inputs_embeds.shape[-1]",
    ],
)
def test_in_tree_dummy_result_only_tested_is_reported(use: str) -> None:
    assert _lines(_OMNI, _OMNI_TEXT.replace("{use}", use)) == [9]


def test_in_tree_dummy_result_added_times_zero_is_quiet() -> None:
    for use in (
        "            inputs_embeds = inputs_embeds + placeholder.mean() * 0.0",
        "            if placeholder is not None:\n                inputs_embeds += placeholder.mean() * 0.0",
    ):
        assert _lines(_OMNI, _OMNI_TEXT.replace("{use}", use)) == [], use


@pytest.mark.parametrize(
    "read",
    [
        "            dummy_layers = self.audio_tower.dummy_forward().layer_features",
        '            dummy_layers = getattr(probe, "layer_features", None)',
    ],
)
def test_side_output_read_in_other_spellings(read: str) -> None:
    text = _AUDIO.replace("            dummy_layers = probe.layer_features", read)
    assert read in text
    lost = text.replace(
        "{text_only}", "            if dummy_layers is not None:\n                layer_feed = None"
    )
    assert 32 in _lines(_AUDIO_GEN, lost)
    kept = text.replace("{text_only}", "            layer_feed = dummy_layers")
    assert 32 not in _lines(_AUDIO_GEN, kept)
