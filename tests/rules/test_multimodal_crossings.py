"""One medium's data crossed with another's, media inputs withheld from the method that takes them, sibling
media methods patched apart, training fallbacks that skip a head, and registrations written as calls (issue 20,
item 3, after the round-3 dev set). Each defect is written in shapes of its own, with the line it must be reported
at and the correct variant that must stay quiet."""

from __future__ import annotations

import ast
import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.rules.multimodal._modality import modality
from npu_lint.veomni.registration import explicit_registrations, registered_types

MODEL = "veomni/models/transformers/toy_omni/modeling_toy_omni.py"


def _lines(text: str, code: str, path: str = MODEL) -> list[int]:
    src = SourceFile.from_text(path, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, [code], Settings()) if d.code == code)


def test_modality_of_a_spelling() -> None:
    assert modality("pixel_values_videos") == "video"
    assert modality("vit_image_cu_seqlens") == "image"
    assert modality("img_embed") == "image"
    assert modality("input_features") == "audio"
    assert modality("pixel_values") is None  # video frames in many models
    assert modality("visual_pos_masks") is None
    assert modality("image_video_mask") is None  # names two media
    assert modality("provided") is None


MERGE = """
def fuse(self, hidden, ids, clip_embeds, sound_embeds):
    video_pos = ids == self.config.video_token_index
    audio_pos = ids == self.config.audio_token_index
    where = MASK.unsqueeze(-1).expand_as(hidden)
    hidden = hidden.masked_scatter(where, clip_embeds_video)
    return hidden
"""


def test_features_scattered_through_a_local_mask_of_another_medium() -> None:
    ok = MERGE.replace("MASK", "video_pos").replace("clip_embeds_video", "video_clip_embeds")
    assert _lines(ok, "NPU701") == []
    bad = MERGE.replace("MASK", "audio_pos").replace("clip_embeds_video", "video_clip_embeds")
    assert _lines(bad, "NPU701") == [5]
    # data whose name says nothing is not judged (renamed features are common)
    assert (
        _lines(MERGE.replace("MASK", "audio_pos").replace("clip_embeds_video", "clip_embeds"), "NPU701") == []
    )


INDEXED = """
import torch


def side_layers(self, img_rows, aud_rows, image_sel, audio_sel, joint_sel):
    out = []
    for img_row, aud_row in zip(img_rows, aud_rows):
        buf = img_row.new_zeros(joint_sel.sum(), img_row.shape[-1])
        buf[FIRST, :] = img_row
        buf[SECOND] = aud_row
        out.append(buf)
    return out
"""


def test_values_written_at_another_mediums_positions() -> None:
    assert _lines(INDEXED.replace("FIRST", "image_sel").replace("SECOND", "audio_sel"), "NPU701") == []
    assert _lines(INDEXED.replace("FIRST", "audio_sel").replace("SECOND", "image_sel"), "NPU701") == [8, 9]


LOOKUPS = """
def towers(self, feats, frames, meta, **kwargs):
    audio_opts = {"lens": meta.get(AUDIO_KEY)}
    frames_out = self.encode_video(frames, offsets=meta[f"{VIDEO_PREFIX}_offsets"], **SPLAT)
    return self.encode_audio(feats, **audio_opts), frames_out, self.get_rope(img=meta.get("image_grid"), vid=meta.get("video_grid"))
"""


def test_metadata_key_of_another_medium() -> None:
    ok = (
        LOOKUPS.replace("AUDIO_KEY", '"audio_lens"')
        .replace("VIDEO_PREFIX", "video")
        .replace("SPLAT", "kwargs")
    )
    assert _lines(ok, "NPU701") == []
    assert _lines(ok.replace('"audio_lens"', '"vid_lens"'), "NPU701") == [2]  # held in a local
    assert (
        _lines(ok.replace("{VIDEO_PREFIX}", "image").replace('f"', '"'), "NPU701") == []
    )  # not a lookup key
    cross = LOOKUPS.replace("AUDIO_KEY", '"audio_lens"').replace("SPLAT", "kwargs")
    assert _lines(cross.replace("{VIDEO_PREFIX}", "image_{kind}"), "NPU701") == [3]  # given to a call
    assert _lines(ok.replace("**kwargs)\n    return", "**audio_opts)\n    return"), "NPU701") == [
        3
    ]  # splatted


OMNI = """
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.qwen2_5_omni.modeling_qwen2_5_omni", target_file="x.py")


@config.override_method("Qwen2_5OmniThinkerForConditionalGeneration.get_audio_features")
def audio_feats(self, input_features, LENGTHS_PARAM):
    return self.audio_tower(input_features, feature_lens=LENGTHS_USE).last_hidden_state


@config.override_method("Qwen2_5OmniThinkerForConditionalGeneration.forward")
def thinker_forward(self, input_ids=None, input_features=None, audio_feature_lengths=None, attention_mask=None, **kwargs):
    embeds = self.get_input_embeddings()(input_ids)
    if input_features is not None:
        kept = audio_feature_lengths[audio_feature_lengths > 0]
        sound = CALL
        embeds = embeds + sound.mean()
    positions, _ = self.get_rope_index(input_ids, None, None, attention_mask, audio_feature_lengths)
    return self.model(inputs_embeds=embeds, position_ids=positions, **kwargs)
"""


def _omni(call: str, param: str = "audio_feature_lengths=None", use: str = "audio_feature_lengths") -> str:
    return OMNI.replace("CALL", call).replace("LENGTHS_PARAM", param).replace("LENGTHS_USE", use)


def test_lengths_withheld_from_the_method_that_takes_them() -> None:
    spec = "veomni/models/transformers/qwen2_5_omni/qwen2_5_omni_gpu_patch_gen_config.py"
    base = _lines(
        _omni("self.get_audio_features(input_features, audio_feature_lengths=kept)"), "NPU701", spec
    )
    assert _lines(_omni("self.get_audio_features(input_features, kept)"), "NPU701", spec) == base
    withheld = _lines(_omni("self.get_audio_features(input_features)"), "NPU701", spec)
    assert sorted(set(withheld) - set(base)) == [16]
    # the file's own get_audio_features no longer takes lengths: nothing is withheld
    dropped = _omni("self.get_audio_features(input_features)", param="feature_lens=None", use="feature_lens")
    assert _lines(dropped, "NPU701", spec) == base


SIBLINGS = """
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.MODEL", target_file="x.py")


@config.override_method("CLS.get_image_features")
def image_feats(self, pixel_values, image_grid_thw=None, **kwargs):
    pixel_values = pixel_values.type(self.visual.dtype)
    return self.visual(pixel_values, grid_thw=image_grid_thw, **kwargs)
"""


def test_one_medium_patched_its_sibling_left_upstream() -> None:
    glm = SIBLINGS.replace("MODEL", "glm4v.modeling_glm4v").replace("CLS", "Glm4vModel")
    spec = "veomni/models/transformers/glm4v/glm4v_gpu_patch_gen_config.py"
    assert _lines(glm, "NPU701", spec) == [9]
    video = glm + textwrap.dedent(
        """

        @config.override_method("Glm4vModel.get_video_features")
        def video_feats(self, pixel_values_videos, video_grid_thw=None, **kwargs):
            return self.visual(pixel_values_videos, grid_thw=video_grid_thw, **kwargs)
        """
    )
    assert _lines(video, "NPU701", spec) == []
    # upstream's video features call the image features: one patch covers both
    qwen3 = SIBLINGS.replace("MODEL", "qwen3_vl.modeling_qwen3_vl").replace("CLS", "Qwen3VLModel")
    assert (
        _lines(qwen3, "NPU701", "veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py") == []
    )


HEAD = """
import torch
from torch import nn


class ToyDiffusionLM(nn.Module):
    def forward(self, hidden, latents=None, noise_level=None):
        loss = hidden.float().pow(2).mean()
        if latents is not None:
            pred = self.denoiser(self.proj_in(hidden), noise_level)
            extra = (pred - latents).pow(2).mean()
        elif GUARD:
            FALLBACK
        return loss + extra
"""


def test_training_fallback_that_skips_the_head() -> None:
    def text(guard: str, fallback: str) -> str:
        return HEAD.replace("GUARD", guard).replace("FALLBACK", fallback)

    ok = "extra = self.denoiser(self.proj_in(hidden[:, :1]), None).sum() * 0.0"
    assert _lines(text("self.training", ok), "NPU703") == []
    assert _lines(text("self.training", "extra = torch.tensor(0.0, device=hidden.device)"), "NPU703") == [12]
    assert _lines(text("is_fsdp_enabled()", "extra = hidden.sum() * 0"), "NPU703") == [12]
    # only the projector runs: the denoiser still gets no gradient, but the value is computed through `self`
    assert _lines(text("self.training", "extra = self.proj_in(hidden).sum() * 0"), "NPU703") == []
    # not a training-time fallback (inference code): not judged
    assert _lines(text("noise_level is None", "extra = hidden.new_zeros(())"), "NPU703") == []


INIT = """
from ...loader import MODELING_REGISTRY


def load_vl(architecture):
    from .generated.patched_modeling_toy_gpu import ToyForConditionalGeneration

    return ToyForConditionalGeneration


def load_text(architecture):
    from .generated.patched_modeling_toy_gpu import ToyForCausalLM

    return ToyForCausalLM


REGISTER
"""


def _types(register: str) -> dict[str, tuple[str, ...]]:
    tree = ast.parse(textwrap.dedent(INIT).replace("REGISTER", register))
    explicit = explicit_registrations(tree)
    return {f.name: registered_types(f, explicit) for f in tree.body if isinstance(f, ast.FunctionDef)}


def test_registrations_written_as_calls() -> None:
    assert _types('MODELING_REGISTRY.register("toy")(load_vl)') == {"load_vl": ("toy",), "load_text": ()}
    assert _types('MODELING_REGISTRY.register("toy_text", load_text)')["load_text"] == ("toy_text",)
    assert _types('MODELING_REGISTRY.register(key="toy_text", cls_or_func=load_text)')["load_text"] == (
        "toy_text",
    )
    assert _types('MODELING_REGISTRY["toy_text"] = load_text')["load_text"] == ("toy_text",)
    loop = 'for t in ("toy", "toy_text"):\n    MODELING_REGISTRY.register(t)(load_vl)'
    assert _types(loop)["load_vl"] == ("toy", "toy_text")
    # a loop over something that is not a literal list of types registers nothing we can read
    assert _types("for t in TYPES:\n    MODELING_REGISTRY.register(t)(load_vl)")["load_vl"] == ()
    # another registry is not the modeling registry
    assert _types('MODEL_CONFIG_REGISTRY.register("toy")(load_vl)')["load_vl"] == ()


SP = """
from veomni.distributed.sequence_parallel import gather_outputs


def media_to_text(self, hidden, frames, stills, group):
    still_out = self.encoder(stills)
    image_feats = still_out.last_hidden_state
    image_layers = still_out.intermediate
    image_feats = gather_outputs(image_feats, gather_dim=0, group=group)
    image_layers = [gather_outputs(x, gather_dim=0, group=group) for x in image_layers]
    frame_out = self.encoder(frames)
    video_feats = frame_out.last_hidden_state
    video_layers = frame_out.intermediate
    VIDEO_FEATS
    VIDEO_LAYERS
    return hidden, image_feats, video_feats, image_layers, video_layers
"""


def test_sequence_parallel_step_on_one_medium_only() -> None:
    feats = "video_feats = gather_outputs(video_feats, gather_dim=0, group=group)"
    layers = "video_layers = [gather_outputs(x, gather_dim=0, group=group) for x in video_layers]"
    assert _lines(SP.replace("VIDEO_FEATS", feats).replace("VIDEO_LAYERS", layers), "NPU701") == []
    assert _lines(SP.replace("VIDEO_FEATS", "pass").replace("VIDEO_LAYERS", layers), "NPU701") == [11]
    assert _lines(SP.replace("VIDEO_FEATS", feats).replace("VIDEO_LAYERS", "pass"), "NPU701") == [12]


def test_where_and_helper_run_fallbacks() -> None:
    where = """
import torch


def pick(self, hidden, audio_sel, image_sel, audio_embeds):
    return torch.where(SEL[..., None], audio_embeds, hidden)
"""
    assert _lines(where.replace("SEL", "audio_sel"), "NPU701") == []
    assert _lines(where.replace("SEL", "image_sel"), "NPU701") == [5]
    # a fallback that hands the head to a helper runs it
    helper = HEAD.replace("GUARD", "self.training").replace(
        "FALLBACK", "extra = zero_term(self.denoiser, hidden)"
    )
    assert _lines(helper, "NPU703") == []


def test_mapping_built_for_a_medium_and_never_read() -> None:
    text = """
def encode(self, stills, clips, meta):
    image_opts = {"lengths": meta.get("image_lengths")}
    video_opts = dict(lengths=meta.get("video_lengths"))
    a = self.encode_image(stills, **image_opts)
    b = self.encode_video(clips, **video_opts)
    return a, b
"""
    assert _lines(text, "NPU701") == []
    # left out of the video call: reported there (its sibling call gets the image mapping)
    assert _lines(text.replace(", **video_opts)", ")"), "NPU701") == [5]
    # no sibling call to point at: reported where it is built
    assert _lines(text.replace(", **video_opts)", ")").replace("encode_video", "run_clips"), "NPU701") == [3]


def test_sequence_parallel_step_added_to_one_medium_method_only() -> None:
    spec = "veomni/models/transformers/glm4v/glm4v_gpu_patch_gen_config.py"
    text = """
import torch
from veomni.distributed.sequence_parallel import gather_outputs
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.glm4v.modeling_glm4v", target_file="x.py")


@config.override_method("Glm4vModel.get_video_features")
def video_feats(self, pixel_values_videos, video_grid_thw=None, **kwargs):
    out = self.visual(pixel_values_videos, grid_thw=video_grid_thw, **kwargs)
    sizes = (video_grid_thw.prod(-1) // self.visual.spatial_merge_size**2).tolist()
    out.pooler_output = torch.split(POOLED, sizes)
    return out
"""
    assert _lines(text.replace("POOLED", "out.pooler_output"), "NPU701", spec) == []
    assert _lines(
        text.replace("POOLED", "gather_outputs(out.pooler_output, gather_dim=0)"), "NPU701", spec
    ) == [13]


def test_values_selected_by_the_same_mask_are_paired_whatever_their_names() -> None:
    """A video DiT calls its frame latents `img`: rows picked with a mask and written back at that mask are paired
    by construction (found on veomni 0.1.12's minimax_h3 DiT)."""
    text = """
import torch


def tokens(self, latents, sound, img_rows, sound_rows, n):
    picked = latents.flatten(0, -2).index_select(0, img_rows)
    video_tokens = self.frame_proj(picked)
    audio_tokens = self.sound_proj(sound.flatten(0, -2).index_select(0, sound_rows))
    out = torch.zeros(n, video_tokens.shape[-1])
    out[img_rows] = video_tokens
    out[sound_rows] = audio_tokens
    out[SEL] = video_tokens
    return out
"""
    assert _lines(text.replace("SEL", "img_rows"), "NPU701") == []
    assert _lines(text.replace("SEL", "sound_rows"), "NPU701") == []  # "sound" names no medium
    assert _lines(text.replace("sound_rows", "audio_rows").replace("SEL", "audio_rows"), "NPU701") == [11]
