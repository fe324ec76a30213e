"""Multimodal contracts generalised after the round-1/round-2 dev sets (issue 20, item 3): each test is a defect
written in a shape the dev cases do not use (other names, other models, other guards), with the line it must be
reported at, and the correct variant that must stay quiet."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source

SPEC = "veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py"


def _lines(text: str, code: str, path: str = SPEC) -> list[int]:
    src = SourceFile.from_text(path, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, [code], Settings()) if d.code == code)


VL_FORWARD = """
from veomni.distributed.parallel_state import get_parallel_state
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


@config.override_method("Qwen3VLModel.forward")
def vl_forward(self, input_ids=None, pixel_values=None, image_grid_thw=None, **kwargs):
    state = get_parallel_state()
    h = self.get_input_embeddings()(input_ids)
    if pixel_values is not None:
        h = h + self.visual(pixel_values, grid_thw=image_grid_thw).pooler_output.mean()
    elif GUARD:
        res = self.visual.dummy_forward()
        pooled = res.pooler_output
        zero = pooled.mean() * 0.0
        h = h + zero.to(h.dtype)
    return self.language_model(inputs_embeds=h, **kwargs)
"""


def test_dummy_forward_guarded_by_another_parallelism() -> None:
    for guard in ("state.tp_enabled", "self.training and state.cp_enabled", "state.sp_size > 1"):
        assert _lines(VL_FORWARD.replace("GUARD", guard), "NPU703") == [13], guard
    for guard in ("state.fsdp_enabled", "self.training and state.fsdp_enabled", "state.dp_shard_enabled"):
        assert _lines(VL_FORWARD.replace("GUARD", guard), "NPU703") == [], guard


def test_dummy_forward_only_without_sequence_parallelism() -> None:
    text = VL_FORWARD.replace("    elif GUARD:\n", "    elif not state.sp_enabled:\n")
    assert _lines(text, "NPU703") == [13]
    # both sides of the test run a dummy forward of the tower: every rank without images joins
    both = text.replace(
        "    return self.language_model",
        "    else:\n        h = h + self.visual.dummy_forward().pooler_output.mean() * 0.0\n    return self.language_model",
    )
    assert _lines(both, "NPU703") == []


def test_dummy_output_cut_from_autograd() -> None:
    base = VL_FORWARD.replace("GUARD", "state.fsdp_enabled")
    assert _lines(base, "NPU703") == []
    cuts = {
        "        pooled = res.pooler_output\n": "        pooled = res.pooler_output.detach()\n",
        "        zero = pooled.mean() * 0.0\n": "        zero = pooled.mean().item() * 0.0\n",
        "        h = h + zero.to(h.dtype)\n": "        h = h + float(zero)\n",
    }
    for old, new in cuts.items():
        assert old in base
        line = base.lstrip("\n").splitlines().index(old.rstrip("\n")) + 1
        assert _lines(base.replace(old, new), "NPU703") == [line], new
    under = base.replace(
        "        res = self.visual.dummy_forward()\n",
        "        with torch.no_grad():\n            res = self.visual.dummy_forward()\n",
    )
    assert _lines(under, "NPU703") == [15]


def test_dummy_forward_defined_without_grad() -> None:
    tower = """
    import torch
    from veomni.patchgen.patch_spec import PatchConfig

    config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


    @config.override_method("Qwen3VLVisionModel.dummy_forward")
    def vision_dummy(self):
        pixel_values = torch.zeros((16, 1536), dtype=self.dtype, device=self.device)
        with torch.inference_mode():
            out = self(pixel_values, grid_thw=torch.tensor([[1, 4, 4]], device=self.device))
        return out
    """
    assert _lines(tower, "NPU703") == [10]
    plain = tower.replace("        with torch.inference_mode():\n            out", "        out")
    assert plain != tower
    assert _lines(plain, "NPU703") == []


MROPE = """
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.qwen2_5_vl.modeling_qwen2_5_vl", target_file="x.py")


@config.override_method("Qwen2_5_VLModel.forward")
def model_forward(self, input_ids=None, position_ids=None, inputs_embeds=None, attention_mask=None, **kwargs):
    if position_ids is None:
        position_ids, deltas = self.get_rope_index(input_ids, None, None, None, attention_mask)
    elif LAYOUT:
        pass
    out = self.language_model(position_ids=position_ids, inputs_embeds=inputs_embeds, **kwargs)
    return out
"""


def test_caller_position_ids_keep_the_collated_layout() -> None:
    # no axis move anywhere: reported where the caller's ids are handled (the `elif` after `if position_ids is None`)
    assert _lines(MROPE.replace("LAYOUT", "position_ids.ndim == 3"), "NPU704") == [10]
    moved = {
        "elif LAYOUT:\n        pass": "elif position_ids.ndim == 3:\n        position_ids = position_ids.movedim(1, 0)",
        "elif LAYOUT:\n        pass\n": "else:\n        position_ids = einops.rearrange(position_ids, 'b s l -> s b l')\n",
    }
    for old, new in moved.items():
        assert old in MROPE
        assert _lines(MROPE.replace(old, new), "NPU704") == [], new
    # re-derived from themselves without a move: reported at that statement
    kept = MROPE.replace(
        "elif LAYOUT:\n        pass", "else:\n        position_ids = position_ids.long().contiguous()"
    )
    assert _lines(kept, "NPU704") == [11]
    # a forward that never takes position ids from the caller has nothing to transpose
    own = (
        MROPE.replace("position_ids=None, ", "")
        .replace("    if position_ids is None:\n", "    if True:\n")
        .replace("    elif LAYOUT:\n        pass\n", "")
    )
    assert _lines(own, "NPU704") == []


OMNI_SPEC = """
import torch
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.qwen2_5_omni.modeling_qwen2_5_omni", target_file="x.py")


@config.override_method("Qwen2_5OmniAudioEncoder.dummy_forward")
def audio_dummy(self):
    conv = self.conv1
    feats = torch.zeros((200, 128), dtype=conv.weight.dtype, device=self.device)
    return self(feats, feature_lens=torch.tensor([200], device=self.device))


@config.override_method("Qwen2_5OmniVisionEncoder.dummy_forward")
def vision_dummy(self):
    pixels = torch.zeros((16, 1176), dtype=VISION_DTYPE, device=self.device)
    return self(pixels, grid_thw=torch.tensor([[1, 4, 4]], device=self.device))
"""


def test_dummy_dtype_against_the_files_own_convention() -> None:
    path = "veomni/models/transformers/qwen2_5_omni/qwen2_5_omni_gpu_patch_gen_config.py"
    for model_level in ("self.dtype", "self.config.torch_dtype", "next(self.parameters()).dtype"):
        assert _lines(OMNI_SPEC.replace("VISION_DTYPE", model_level), "NPU702", path) == [16], model_level
    for live in ("self.patch_embed.proj.weight.dtype", "next(self.patch_embed.parameters()).dtype"):
        assert _lines(OMNI_SPEC.replace("VISION_DTYPE", live), "NPU702", path) == [], live
    # no tower of the file reads a live layer: `self.dtype` is the first parameter's dtype (issue 18), not reported
    both = OMNI_SPEC.replace("conv.weight.dtype", "self.dtype").replace("VISION_DTYPE", "self.dtype")
    assert _lines(both, "NPU702", path) == []


WRAPPER = """
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.qwen2_5_vl.modeling_qwen2_5_vl", target_file="x.py")


@config.override_method("Qwen2_5_VLForConditionalGeneration.forward")
def wrapper_forward(self, input_ids=None, pixel_values=None, pixel_values_videos=None, image_grid_thw=None,
                    video_grid_thw=None, second_per_grid_ts=None, labels=None, **kwargs):
    outputs = self.model(
        input_ids=input_ids,
        pixel_values=pixel_values,
        pixel_values_videos=pixel_values_videos,
        image_grid_thw=image_grid_thw,
        video_grid_thw=video_grid_thw,
        second_per_grid_ts=second_per_grid_ts,
        **kwargs,
    )
    return outputs
"""


def test_media_input_dropped_is_reported_in_the_call() -> None:
    assert _lines(WRAPPER, "NPU701") == []
    # a keyword left out of the inner model's call: reported at the keyword it used to follow (upstream order)
    assert _lines(WRAPPER.replace("        image_grid_thw=image_grid_thw,\n", ""), "NPU701") == [12]
    # passed as a constant instead: reported at that value
    assert _lines(WRAPPER.replace("video_grid_thw=video_grid_thw,", "video_grid_thw=None,"), "NPU701") == [14]


def test_missing_dummy_forward_is_reported_where_the_else_belongs() -> None:
    text = VL_FORWARD.replace(
        "    elif GUARD:\n        res = self.visual.dummy_forward()\n        pooled = res.pooler_output\n"
        "        zero = pooled.mean() * 0.0\n        h = h + zero.to(h.dtype)\n",
        "",
    )
    assert "dummy_forward" not in text
    assert _lines(text, "NPU703") == [12]  # the last line of the `if pixel_values is not None:` branch
    # an `else` that does something else: reported at its first statement
    other = text.replace(
        "    return self.language_model", "    else:\n        h = h * 1.0\n    return self.language_model"
    )
    assert _lines(other, "NPU703") == [14]


def test_side_features_reset_in_the_text_only_branch() -> None:
    text = """
    from veomni.patchgen.patch_spec import PatchConfig

    config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


    @config.override_method("Qwen3VLModel.forward")
    def vl_forward(self, input_ids=None, pixel_values=None, image_grid_thw=None, **kwargs):
        h = self.get_input_embeddings()(input_ids)
        if pixel_values is not None:
            feats = self.get_image_features(pixel_values, image_grid_thw)
            h = h + feats.pooler_output.mean()
            layers_side = feats.deepstack_features
        else:
            dummy = self.visual.dummy_forward()
            h = h + dummy.pooler_output.mean() * 0.0
            dummy_side = dummy.deepstack_features
        if pixel_values is not None:
            side = layers_side
        else:
            side = None
        return self.language_model(inputs_embeds=h, deepstack_visual_embeds=side, **kwargs)
    """
    assert _lines(text, "NPU703") == [20]
    fed = text.replace("            side = None\n", "            side = dummy_side\n")
    assert fed != text
    assert _lines(fed, "NPU703") == []


def test_checkpoint_rename_reported_at_the_assignment() -> None:
    text = """
    from veomni.patchgen.patch_spec import PatchConfig

    config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


    @config.override_method("Qwen3VLModel.__init__")
    def vl_init(self, config):
        super().__init__(config)
        self.visual = Qwen3VLVisionModel._from_config(config.vision_config)
        self.text_model = Qwen3VLTextModel._from_config(config.text_config)
        self.rope_deltas = None
    """
    assert _lines(text, "NPU705") == [10]


def test_positional_media_argument_replaced_after_a_dropped_one() -> None:
    text = """
    from veomni.patchgen.patch_spec import PatchConfig

    config = PatchConfig(source_module="transformers.models.qwen2_5_omni.modeling_qwen2_5_omni", target_file="x.py")


    @config.override_method("Qwen2_5OmniThinkerForConditionalGeneration.forward")
    def thinker_forward(self, input_ids=None, input_features=None, pixel_values=None, pixel_values_videos=None,
                        image_grid_thw=None, video_grid_thw=None, attention_mask=None, feature_attention_mask=None,
                        audio_feature_lengths=None, position_ids=None, video_second_per_grid=None, **kwargs):
        h = self.model(input_ids=input_ids, input_features=input_features, pixel_values=pixel_values,
                       pixel_values_videos=pixel_values_videos, feature_attention_mask=feature_attention_mask)
        if position_ids is None:
            position_ids, _ = self.get_rope_index(
                input_ids, image_grid_thw, video_grid_thw, attention_mask, audio_feature_lengths, GIVEN
            )
        else:
            position_ids = position_ids.transpose(0, 1)
        return h, position_ids
    """
    assert _lines(text.replace("GIVEN", "video_second_per_grid"), "NPU701") == []
    # `use_audio_in_video` is not passed (upstream passes it before `audio_feature_lengths`): the argument after
    # `audio_feature_lengths` is where `video_second_per_grid` belongs
    assert _lines(text.replace("GIVEN", "None"), "NPU701") == [14]
    # the argument left off the end of the call: reported at the last argument it used to follow
    cut = text.replace("audio_feature_lengths, GIVEN\n", "audio_feature_lengths\n")
    assert cut != text
    assert _lines(cut, "NPU701") == [14]


def test_swapped_media_keywords() -> None:
    swapped = WRAPPER.replace("image_grid_thw=image_grid_thw,", "image_grid_thw=video_grid_thw,").replace(
        "video_grid_thw=video_grid_thw,", "video_grid_thw=image_grid_thw,"
    )
    assert swapped.count("_grid_thw=") == 2 + 2  # the two keywords (and the two signature defaults)
    assert _lines(swapped, "NPU701") == [13, 14]


TWO_MEDIA = """
from veomni.distributed.parallel_state import get_parallel_state
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.qwen2_vl.modeling_qwen2_vl", target_file="x.py")


@config.override_method("Qwen2VLModel.forward")
def vl_forward(self, input_ids=None, pixel_values=None, pixel_values_videos=None, image_grid_thw=None,
               video_grid_thw=None, **kwargs):
    h = self.get_input_embeddings()(input_ids)
    if pixel_values is not None:
        h = h + self.visual(pixel_values, grid_thw=image_grid_thw).mean()
    elif get_parallel_state().fsdp_enabled:
        h = h + self.visual.dummy_forward().mean() * 0.0
    if pixel_values_videos is not None:
        h = h + self.visual(pixel_values_videos, grid_thw=video_grid_thw).mean()
    elif VIDEO_GUARD:
        h = h + self.visual.dummy_forward().mean() * 0.0
    return self.language_model(inputs_embeds=h, **kwargs)
"""


def test_video_dummy_conditioned_on_images() -> None:
    quiet = (
        "get_parallel_state().fsdp_enabled",
        "video_grid_thw is None and get_parallel_state().fsdp_enabled",
    )
    for guard in quiet:
        assert _lines(TWO_MEDIA.replace("VIDEO_GUARD", guard), "NPU703") == [], guard
    for guard in ("pixel_values is None", "image_grid_thw is None and get_parallel_state().fsdp_enabled"):
        assert _lines(TWO_MEDIA.replace("VIDEO_GUARD", guard), "NPU703") == [17], guard


def test_remapped_config_never_used() -> None:
    text = """
    import copy
    from functools import partial

    from veomni.patchgen.patch_spec import PatchConfig
    from veomni.utils.constants import IMAGE_INPUT_INDEX, VIDEO_INPUT_INDEX

    config = PatchConfig(source_module="transformers.models.qwen2_vl.modeling_qwen2_vl", target_file="x.py")


    @config.override_method("Qwen2VLForConditionalGeneration.get_position_id_func")
    def pos_func(self):
        cfg = copy.deepcopy(self.config)
        cfg.image_token_id = IMAGE_INPUT_INDEX
        cfg.video_token_id = VIDEO_INPUT_INDEX
        holder = PosHolder(config=self.config)
        return partial(get_position_id, Qwen2VLModel.get_rope_index, holder)
    """
    assert _lines(text, "NPU704") == [15]
    used = text.replace("PosHolder(config=self.config)", "PosHolder(config=cfg)")
    assert used != text
    assert _lines(used, "NPU704") == []


def test_placeholder_stored_on_a_field_the_config_lacks() -> None:
    text = """
    import copy

    from veomni.patchgen.patch_spec import PatchConfig
    from veomni.utils.constants import IMAGE_INPUT_INDEX, VIDEO_INPUT_INDEX

    config = PatchConfig(source_module="transformers.models.qwen2_vl.modeling_qwen2_vl", target_file="x.py")


    @config.override_method("Qwen2VLForConditionalGeneration.get_position_id_func")
    def pos_func(self):
        cfg = copy.copy(self.config)
        cfg.image_token_id = IMAGE_INPUT_INDEX
        cfg.VIDEO_FIELD = VIDEO_INPUT_INDEX
        return Holder(cfg)
    """
    assert _lines(text.replace("VIDEO_FIELD", "video_token_id"), "NPU704") == []
    # `video_token_index` is not a Qwen2VLConfig field: reported there
    assert _lines(text.replace("VIDEO_FIELD", "video_token_index"), "NPU704") == [13]


KWARGS_WRAPPER = """
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.qwen2_vl.modeling_qwen2_vl", target_file="x.py")


@config.override_method("Qwen2VLForConditionalGeneration.forward")
def wrapper(self, input_ids=None, labels=None, **kwargs):
    REMOVE
    return self.model(input_ids=input_ids, **kwargs)
"""


def test_media_removed_from_kwargs_in_other_forms() -> None:
    assert _lines(KWARGS_WRAPPER.replace("REMOVE", "pass"), "NPU701") == []
    removals = (
        "kwargs = {k: v for k, v in kwargs.items() if k not in ('pixel_values_videos', 'labels')}",
        "kwargs = {k: v for k, v in kwargs.items() if k != 'image_grid_thw'}",
        "unused = kwargs.pop('pixel_values', None)",
        "kwargs['video_grid_thw'] = None",
    )
    for removal in removals:
        assert _lines(KWARGS_WRAPPER.replace("REMOVE", removal), "NPU701") == [8], removal
    # popped and handed on under its own name: not removed
    kept = "grid = kwargs.pop('image_grid_thw', None)\n    kwargs['image_grid_thw'] = grid"
    assert _lines(KWARGS_WRAPPER.replace("REMOVE", kept), "NPU701") == []
    # a filtered side copy (for logging) while `**kwargs` itself is handed on: nothing is removed
    side = "shown = {k: v for k, v in kwargs.items() if k != 'pixel_values'}\n    print(shown)"
    assert _lines(KWARGS_WRAPPER.replace("REMOVE", side), "NPU701") == []
    # a filtered copy handed on instead of `**kwargs`
    copy = KWARGS_WRAPPER.replace("REMOVE", "rest = {k: v for k, v in kwargs.items() if k != 'pixel_values'}")
    assert _lines(
        copy.replace("input_ids=input_ids, **kwargs)", "input_ids=input_ids, **rest)"), "NPU701"
    ) == [8]


def test_dummy_forward_that_never_runs_the_tower() -> None:
    tower = """
    import torch
    from veomni.patchgen.patch_spec import PatchConfig

    config = PatchConfig(source_module="transformers.models.qwen2_audio.modeling_qwen2_audio", target_file="x.py")


    @config.override_method("Qwen2AudioEncoder.dummy_forward")
    def audio_dummy(self):
        feats = torch.zeros((1, 128, 3000), dtype=self.conv1.weight.dtype, device=self.conv1.weight.device)
        RESULT
    """
    assert _lines(tower.replace("RESULT", "return self(feats)"), "NPU703") == []
    assert _lines(tower.replace("RESULT", "return super().forward(feats)"), "NPU703") == []
    made_up = "return torch.zeros((1, 1500, 1280), dtype=feats.dtype, device=feats.device)"
    assert _lines(tower.replace("RESULT", made_up), "NPU703") == [10]


def test_media_passed_positionally_in_another_order() -> None:
    text = """
    from veomni.patchgen.patch_spec import PatchConfig

    config = PatchConfig(source_module="transformers.models.qwen2_5_omni.modeling_qwen2_5_omni", target_file="x.py")


    @config.override_method("Qwen2_5OmniThinkerForConditionalGeneration.forward")
    def thinker_forward(self, input_ids=None, input_features=None, pixel_values=None, pixel_values_videos=None,
                        image_grid_thw=None, video_grid_thw=None, attention_mask=None, feature_attention_mask=None,
                        audio_feature_lengths=None, position_ids=None, video_second_per_grid=None, **kwargs):
        h = self.model(input_ids=input_ids, input_features=input_features, pixel_values=pixel_values,
                       pixel_values_videos=pixel_values_videos, feature_attention_mask=feature_attention_mask)
        position_ids, _ = self.get_rope_index(
            input_ids, FIRST, SECOND, attention_mask, audio_feature_lengths, video_second_per_grid
        )
        return h, position_ids
    """
    ok = text.replace("FIRST", "image_grid_thw").replace("SECOND", "video_grid_thw")
    assert _lines(ok, "NPU701") == []
    swapped = text.replace("FIRST", "video_grid_thw").replace("SECOND", "image_grid_thw")
    assert _lines(swapped, "NPU701") == [13]


def test_zero_term_added_into_a_local_nobody_reads() -> None:
    base = VL_FORWARD.replace("GUARD", "state.fsdp_enabled")
    dead = base.replace("        h = h + zero.to(h.dtype)\n", "        h_with_tower = h + zero.to(h.dtype)\n")
    assert dead != base
    assert _lines(dead, "NPU703") == [14]  # at the dummy forward: its zero-valued output never reaches `h`
    read = dead.replace("inputs_embeds=h,", "inputs_embeds=h_with_tower if pixel_values is None else h,")
    assert _lines(read, "NPU703") == []


SP_TOWER = """
import torch
from torch import nn
from veomni.distributed.parallel_state import get_parallel_state
from veomni.distributed.sequence_parallel import sp_pad_and_slice


class ToyVisionTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(48, 16)
        self.table = nn.Embedding(1024, 16)

    def forward(self, patches, grid):
        hidden = self.embed(patches)
        table = self.table(torch.arange(int(grid.prod()), device=patches.device))
        if get_parallel_state().sp_enabled:
            table = sp_pad_and_slice(table, dim=0, pad_value=0, pad_scale=4)
        return hidden + table

    def dummy_forward(self):
        state = get_parallel_state()
        rows = 16 * (state.sp_size if state.sp_enabled else 1)
        fake = torch.zeros((rows, 48), dtype=self.embed.weight.dtype, device=self.embed.weight.device)
        SLICE
        return self(fake, torch.tensor([1, 4, rows // 4], device=fake.device))
"""


def test_dummy_input_sized_for_sp_but_not_sliced() -> None:
    path = "veomni/models/transformers/toy/modeling_toy.py"
    assert _lines(SP_TOWER.replace("SLICE", "pass"), "NPU703", path) == [23]
    sliced = "fake = sp_pad_and_slice(fake, dim=0, pad_value=0, pad_scale=4)"
    assert _lines(SP_TOWER.replace("SLICE", sliced), "NPU703", path) == []
    # a per-rank sized input (not derived from sp_size) needs no slicing
    per_rank = SP_TOWER.replace("rows = 16 * (state.sp_size if state.sp_enabled else 1)", "rows = 16")
    assert _lines(per_rank.replace("SLICE", "pass"), "NPU703", path) == []


TYPES = """
import numpy as np


class ToyOmniProcessor:
    def types(self, input_ids):
        modality = np.zeros_like(input_ids)
        modality[np.isin(input_ids, self.image_ids)] = IMAGE
        modality[np.isin(input_ids, self.video_ids)] = VIDEO
        modality[np.isin(input_ids, self.audio_ids)] = AUDIO
        return modality
"""


def _types(image: int, video: int, audio: int) -> list[int]:
    text = TYPES.replace("IMAGE", str(image)).replace("VIDEO", str(video)).replace("AUDIO", str(audio))
    return _lines(text, "NPU704", "veomni/models/transformers/toy_omni/modeling_toy_omni.py")


def test_mm_token_type_codes_follow_the_processor_convention() -> None:
    assert _types(1, 2, 3) == []
    assert _types(1, 2, 2) == [9]  # audio collapsed onto video
    assert _types(2, 1, 3) == [7, 8]  # image and video swapped: each against transformers' codes
    assert _types(1, 2, 0) == [9]  # audio typed as text


def test_a_mask_that_also_names_another_modality_selects_none() -> None:
    """A model writing its video frames with the image token (GLM-4V) types image tokens inside a video segment
    as video: the mask names both modalities, so no code is checked against one of them (a false positive on
    transformers 5.9.0's glm4v/glm46v processors)."""
    text = """
import numpy as np


class ToyFrameProcessor:
    def types(self, input_ids):
        ids = np.array(input_ids)
        kinds = np.zeros_like(ids)
        in_clip = np.cumsum(ids == self.clip_start_id) > np.cumsum(ids == self.clip_end_id)
        is_video_segment = in_clip
        kinds[(ids == self.image_token_id) & is_video_segment] = 2
        kinds[(ids == self.image_token_id) & ~is_video_segment] = 1
        return kinds
"""
    path = "veomni/models/transformers/toy_frames/modeling_toy_frames.py"
    assert _lines(text, "NPU704", path) == []
    # the same codes on masks naming only the image token: image typed as video, reported
    plain = text.replace(" & is_video_segment", "").replace(" & ~is_video_segment", "")
    assert _lines(plain, "NPU704", path) == [10]


def test_mm_token_type_codes_in_a_nested_helper_reported_once() -> None:
    text = """
import torch


def forward(self, input_ids, video_grid_thw):
    def build(ids):
        kinds = torch.zeros_like(ids)
        kinds[ids == self.config.image_token_id] = 1
        kinds[ids == self.config.video_token_id] = 1
        return kinds

    return self.rope_index(input_ids, build(input_ids), video_grid_thw)
"""
    assert _lines(text, "NPU704") == [8]
    # labels masked at media positions are not token types
    labels = text.replace("kinds", "labels").replace("] = 1\n", "] = -100\n")
    assert _lines(labels, "NPU704") == []


def test_mm_token_type_codes_through_where_and_masked_fill() -> None:
    text = """
import torch


def rope_types(input_ids, cfg):
    token_kind = torch.zeros_like(input_ids)
    token_kind = torch.where(input_ids == cfg.image_token_id, 1, torch.where(input_ids == cfg.video_token_id, VIDEO, token_kind))
    token_kind = token_kind.masked_fill(input_ids == cfg.audio_token_id, AUDIO)
    return token_kind
"""
    assert _lines(text.replace("VIDEO", "2").replace("AUDIO", "3"), "NPU704") == []
    assert _lines(text.replace("VIDEO", "1").replace("AUDIO", "3"), "NPU704") == [
        6
    ]  # video on the image code
    assert _lines(text.replace("VIDEO", "2").replace("AUDIO", "2"), "NPU704") == [
        7
    ]  # audio on the video code
