"""Multimodal contracts read through the media data-flow view (`npu_lint.veomni.mediaflow`): a no-media early
return that drops the media features (NPU703), the wrapped model cut off from the caller's `**kwargs` (NPU612),
per-medium records, merges, counts and guards kept for every medium (NPU719), and M-RoPE rows handed whole
(NPU704). Each bad snippet names the lines that must be reported; each good one is the same code written
correctly."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni import mediaflow


def _lines(code: str, text: str, path: str) -> list[int]:
    src = SourceFile.from_text(path, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, [code], Settings()) if d.code == code)


MODEL = "veomni/models/transformers/toy_vl/modeling_toy_vl.py"

# -- the data-flow view ------------------------------------------------------------------------------------------


def test_roles_and_media() -> None:
    assert mediaflow.medium_of("visual_pos_masks") == "image"
    assert mediaflow.medium_of("deepstack_visual_embeds") == "side"
    assert mediaflow.medium_of("pixel_values_videos") == "video"
    assert mediaflow.medium_of("input_features") == "audio"
    assert mediaflow.medium_of("hidden_states") is None
    assert mediaflow.role_of("visual_pos_masks") == "layout"
    assert mediaflow.role_of("visual_embeds") == "feature"
    assert mediaflow.role_of("pixel_values") == "input"


def test_derived_follows_assignments() -> None:
    func = ast.parse(
        textwrap.dedent(
            """
            def f(a, b):
                c = a.mean() * 0.0
                d = b + 1
                e = d + c
                return e
            """
        )
    ).body[0]
    assert "e" in mediaflow.derived(func.body, {"a"})
    assert "d" not in mediaflow.derived(func.body, {"a"})
    assert mediaflow.reaches(func.body, {"a"}, func.body[-1].value)


# -- NPU703: the no-media early return keeps the features' zero term ----------------------------------------------

DEEPSTACK_DROPPED = """
class ToyTextModel:
    def _deepstack_process(self, hidden_states, visual_pos_masks, visual_embeds):
        if visual_pos_masks is None:
            return hidden_states
        hidden_states = hidden_states.clone()
        hidden_states[visual_pos_masks, :] = hidden_states[visual_pos_masks, :] + visual_embeds
        return hidden_states
"""

DEEPSTACK_COMPUTED_NOT_ADDED = """
class ToyTextModel:
    def _deepstack_process(self, hidden_states, visual_pos_masks, visual_embeds):
        if visual_pos_masks is None:
            zero = visual_embeds.mean() * 0.0
            return hidden_states
        hidden_states = hidden_states.clone()
        hidden_states[visual_pos_masks, :] = hidden_states[visual_pos_masks, :] + visual_embeds
        return hidden_states
"""

DEEPSTACK_GOOD = """
class ToyTextModel:
    def _deepstack_process(self, hidden_states, visual_pos_masks, visual_embeds):
        if visual_pos_masks is None:
            zero_term = visual_embeds.to(hidden_states.dtype).mean() * 0.0
            return hidden_states + zero_term
        hidden_states = hidden_states.clone()
        hidden_states[visual_pos_masks, :] = hidden_states[visual_pos_masks, :] + visual_embeds
        return hidden_states
"""

MASK_HELPER = """
class ToyModel:
    def get_placeholder_mask(self, input_ids, inputs_embeds, image_features=None, image_mask=None):
        if image_mask is None:
            return inputs_embeds
        n_image_features = image_features.shape[0]
        return image_mask, n_image_features
"""


def test_npu703_no_media_return_drops_features() -> None:
    assert _lines("NPU703", DEEPSTACK_DROPPED, MODEL) == [4]


def test_npu703_zero_term_computed_never_added() -> None:
    assert _lines("NPU703", DEEPSTACK_COMPUTED_NOT_ADDED, MODEL) == [5]


def test_npu703_zero_term_added_is_quiet() -> None:
    assert _lines("NPU703", DEEPSTACK_GOOD, MODEL) == []


def test_npu703_features_not_merged_by_the_media_path_is_quiet() -> None:
    # the media path does not add the features to the stream either: nothing for the early return to keep
    assert _lines("NPU703", MASK_HELPER, MODEL) == []


# -- NPU612: the wrapped model gets the caller's keywords as upstream hands them ----------------------------------

BANNER = """
# ==============================================================================
#  AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
# ==============================================================================
#
#  Source: transformers.models.qwen3_vl.modeling_qwen3_vl
#  Based on: transformers==5.9.0
#
"""

KWARGS_TO_LOSS_ONLY = (
    BANNER
    + """
class Qwen3VLForConditionalGeneration:
    def forward(self, input_ids=None, attention_mask=None, labels=None, **kwargs):
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
        )
        logits = self.lm_head(outputs[0])
        return self.loss_function(logits, labels, **kwargs)
"""
)

KWARGS_TO_MODEL = KWARGS_TO_LOSS_ONLY.replace(
    "            attention_mask=attention_mask,\n        )",
    "            attention_mask=attention_mask,\n            **kwargs,\n        )",
)

GENERATED = "veomni/models/transformers/qwen3_vl/generated/patched_modeling_qwen3_vl_npu.py"


def test_npu612_model_loses_upstream_kwargs() -> None:
    assert _lines("NPU612", KWARGS_TO_LOSS_ONLY, GENERATED) == [13]


def test_npu612_model_gets_kwargs_is_quiet() -> None:
    assert _lines("NPU612", KWARGS_TO_MODEL, GENERATED) == []


def test_npu612_no_upstream_source_is_quiet() -> None:
    # without a banner naming the upstream module there is no upstream call to compare with
    assert _lines("NPU612", KWARGS_TO_LOSS_ONLY.replace("Source:", "From:"), GENERATED) == []


# -- NPU719: per-medium merges, records, counts and guards --------------------------------------------------------

PROCESSOR = "veomni/models/transformers/toy_omni/processing_toy_omni.py"

MERGE_DROPS_AUDIO = """
class ToyProcessor:
    def __call__(self, text, images=None, videos=None, audios=None):
        audio_inputs = self.feature_extractor(audios) if audios else {}
        images_inputs = self.image_processor(images=images) if images else {}
        videos_inputs = self.video_processor(videos=videos) if videos else {}
        texts_inputs = self.tokenizer(text)
        return dict(data={**texts_inputs, **images_inputs, **videos_inputs})
"""


def test_npu719_merge_leaves_out_a_medium() -> None:
    assert _lines("NPU719", MERGE_DROPS_AUDIO, PROCESSOR) == [7]


def test_npu719_merge_of_every_medium_is_quiet() -> None:
    good = MERGE_DROPS_AUDIO.replace("**videos_inputs}", "**videos_inputs, **audio_inputs}")
    assert _lines("NPU719", good, PROCESSOR) == []


RECORDS = """
def split_media(conversation, images, videos, video_audios, audio_audios):
    conv_images, conv_videos, conv_audios = [], [], []
    mask = {"image": [], "video": [], "audio": []}
    for turn in conversation:
        is_output = turn["role"] == "assistant"
        if turn["type"] == "image":
            conv_images.append(next(images))
            mask["image"].append(is_output)
        elif turn["type"] == "video":
            conv_videos.append(next(videos))
            conv_audios.append(next(video_audios))
            mask["video"].append(is_output)
            mask["audio"].append(is_output)
        elif turn["type"] == "audio":
            conv_audios.append(next(audio_audios))
            mask["audio"].append(is_output)
    return conv_images, conv_videos, conv_audios, mask
"""


def test_npu719_record_without_its_mask_entry() -> None:
    bad = RECORDS.replace(
        '            mask["video"].append(is_output)\n            mask["audio"].append(is_output)\n',
        '            mask["video"].append(is_output)\n',
    )
    assert _lines("NPU719", bad, "veomni/data/multimodal/toy_transform.py") == [11]


def test_npu719_records_kept_together_is_quiet() -> None:
    assert _lines("NPU719", RECORDS, "veomni/data/multimodal/toy_transform.py") == []


COUNTS = """
class ToyProcessor:
    def expand(self, text, image_grid_thw, video_grid_thw, merge_length_image, merge_length_video):
        out = []
        for piece in text:
            if piece == "<image>":
                image_seq_length = next(image_grid_thw).prod() // merge_length_image
                out.append("<pad>" * image_seq_length)
            elif piece == "<video>":
                video_seq_length = next(video_grid_thw).prod() // merge_length_video
                out.append("<pad>" * video_seq_length)
        return out
"""


def test_npu719_count_from_another_medium_grid() -> None:
    bad = COUNTS.replace(
        "next(image_grid_thw).prod() // merge_length_image",
        "next(video_grid_thw).prod() // merge_length_image",
    )
    assert _lines("NPU719", bad, PROCESSOR) == [6]


def test_npu719_counts_from_own_grids_are_quiet() -> None:
    assert _lines("NPU719", COUNTS, PROCESSOR) == []


GUARDS = """
class ToyProcessor:
    def __call__(self, text, images=None, videos=None, audios=None):
        if audios:
            audio_inputs = self.feature_extractor(audios)
        if images:
            image_inputs = self.image_processor(images)
        if videos:
            video_inputs = self.video_processor(videos)
        return text
"""


def test_npu719_guard_lets_empty_list_through() -> None:
    bad = GUARDS.replace("if audios:", "if audios is not None:")
    assert _lines("NPU719", bad, PROCESSOR) == [3]


def test_npu719_truthy_guards_are_quiet() -> None:
    assert _lines("NPU719", GUARDS, PROCESSOR) == []


def test_npu719_model_forward_none_tests_are_quiet() -> None:
    forward = """
    class ToyModel:
        def forward(self, input_ids, pixel_values=None, pixel_values_videos=None, input_features=None):
            if pixel_values is not None:
                x = self.visual(pixel_values)
            if pixel_values_videos is not None:
                y = self.visual(pixel_values_videos)
            if input_features is not None:
                z = self.audio_tower(input_features)
            return input_ids
    """
    assert _lines("NPU719", forward, MODEL) == []


# -- NPU704: M-RoPE rows -------------------------------------------------------------------------------------------

ROPE_SPEC = """
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(
    source_module="transformers.models.qwen2_5_omni.modeling_qwen2_5_omni",
    target_file="patched_modeling_qwen2_5_omni_gpu.py",
)


@config.override_method("Qwen2_5OmniPreTrainedModelForConditionalGeneration.get_rope_index")
def toy_get_rope_index(self, input_ids=None, image_grid_thw=None, video_grid_thw=None, attention_mask=None):
    video_llm_pos_ids = self.positions(input_ids)
    audio_llm_pos_ids = self.positions(attention_mask)
    t_ntoken_per_chunk, st_idx = 25, 0
    video_chunk_indexes = self.get_chunked_index(video_llm_pos_ids[0], t_ntoken_per_chunk, st_idx)
    audio_chunk_indexes = self.get_chunked_index(audio_llm_pos_ids[0], t_ntoken_per_chunk, st_idx)
    return video_chunk_indexes, audio_chunk_indexes
"""

SPEC_PATH = "veomni/models/transformers/qwen2_5_omni/qwen2_5_omni_gpu_patch_gen_config.py"


def test_npu704_whole_position_block_for_a_row() -> None:
    bad = ROPE_SPEC.replace("video_llm_pos_ids[0], t_", "video_llm_pos_ids, t_")
    assert _lines("NPU704", bad, SPEC_PATH) == [14]


def test_npu704_rows_as_upstream_is_quiet() -> None:
    assert _lines("NPU704", ROPE_SPEC, SPEC_PATH) == []


# -- NPU503: the registry hands out the package's own class ------------------------------------------------------

PROCESSOR_LOADER = """
from ...loader import MODEL_PROCESSOR_REGISTRY


@MODEL_PROCESSOR_REGISTRY.register("ToyProcessor")
def register_toy_processor():
    from IMPORT import ToyProcessor

    return ToyProcessor
"""

LOCAL_PROCESSOR = """
from transformers.models.toy.processing_toy import ToyProcessor as _Upstream


class ToyProcessor(_Upstream):
    def __call__(self, text=None, images=None, audios=None):
        return super().__call__(text=text, images=images, audio=audios or None)
"""


def _registry_findings(tmp_path: Path, module: str) -> list[str]:
    from tests.rules.test_packaging_examples import CONTEXT, TOY, _build, _run

    files = {**CONTEXT["NPU503"], f"{TOY}/processing_toy.py": LOCAL_PROCESSOR}
    _build(tmp_path, files, f"{TOY}/__init__.py", PROCESSOR_LOADER.replace("IMPORT", module))
    out = _run(tmp_path, "NPU503").stdout
    return [line.split(f"{TOY}/__init__.py:")[1] for line in out.splitlines() if " NPU503 " in line]


def test_npu503_stock_class_for_a_package_subclass(tmp_path: Path) -> None:
    found = _registry_findings(tmp_path, "transformers.models.toy.processing_toy")
    assert [f.split(":")[0] for f in found] == ["6"]


def test_npu503_package_class_is_quiet(tmp_path: Path) -> None:
    assert _registry_findings(tmp_path, ".processing_toy") == []


# -- NPU705: checkpoint hooks on every class the loader returns ----------------------------------------------------

HOOKS = """
from ...loader import MODELING_REGISTRY


@MODELING_REGISTRY.register("toy_omni")
def register_toy_omni_modeling(architecture: str):
    from .checkpoint_tensor_converter import create_converter
    from .generated.patched_modeling_toy_omni_gpu import (
        ToyOmniForConditionalGeneration,
        ToyOmniThinkerForConditionalGeneration,
        ToyOmniThinkerTextModel,
    )

    for model_cls in (
        ToyOmniForConditionalGeneration,
        ToyOmniThinkerForConditionalGeneration,
        ToyOmniThinkerTextModel,
    ):
        model_cls._create_checkpoint_tensor_converter = staticmethod(create_converter)
    if "ThinkerTextModel" in architecture:
        return ToyOmniThinkerTextModel
    if "ThinkerForConditionalGeneration" in architecture:
        return ToyOmniThinkerForConditionalGeneration
    return ToyOmniForConditionalGeneration
"""

INIT = "veomni/models/transformers/toy_omni/__init__.py"


def test_npu705_hook_missing_on_a_returned_class() -> None:
    bad = HOOKS.replace("        ToyOmniThinkerTextModel,\n    ):", "    ):")
    assert _lines("NPU705", bad, INIT) == [13]


def test_npu705_hook_on_every_returned_class_is_quiet() -> None:
    assert _lines("NPU705", HOOKS, INIT) == []


# -- NPU703: every medium's encoder branch falls back to its dummy pass; zero terms are kept -----------------------

SIBLINGS = """
class ToyOmni:
    def image_forward(self, inputs_embeds, image_inputs=None, image_mask=None):
        if image_inputs:
            feats = self.image_encoder.lm_encode(**image_inputs)
            inputs_embeds = inputs_embeds.masked_scatter(image_mask, feats)
        elif self.training:
            inputs_embeds = inputs_embeds + self.image_encoder.lm_dummy_encode().mean() * 0.0
        return inputs_embeds

    def audio_forward(self, inputs_embeds, audio_inputs=None, audio_mask=None):
        if audio_inputs:
            feats = self.audio_encoder.lm_encode(**audio_inputs)
            inputs_embeds = inputs_embeds.masked_scatter(audio_mask, feats)
        elif self.training:
            inputs_embeds = inputs_embeds + self.audio_encoder.lm_dummy_encode().mean() * 0.0
        return inputs_embeds

    def video_forward(self, inputs_embeds, video_inputs=None, video_mask=None):
        if video_inputs:
            if self.video_encoder is not None:
                feats = self.video_encoder.lm_encode(**video_inputs)
            else:
                feats = self.image_encoder.lm_encode(**video_inputs)
            inputs_embeds = inputs_embeds.masked_scatter(video_mask, feats)
        elif self.training:
            inputs_embeds = inputs_embeds + self.image_encoder.lm_dummy_encode().mean() * 0.0
        return inputs_embeds
"""

SEED = "veomni/models/seed_omni/modeling_toy_omni.py"


def test_npu703_sibling_medium_without_dummy() -> None:
    bad = SIBLINGS.replace(
        "        elif self.training:\n            inputs_embeds = inputs_embeds + self.audio_encoder.lm_dummy_encode().mean() * 0.0\n",
        "",
    )
    assert _lines("NPU703", bad, SEED) == [13]


def test_npu703_every_sibling_falls_back_is_quiet() -> None:
    assert _lines("NPU703", SIBLINGS, SEED) == []


DECODER = """
class ToyDecoderHead:
    def forward(self, hidden_states, labels=None):
        loss = {}
        if labels is not None:
            loss["image_decoder_loss"] = self.image_decoder.loss(hidden_states, labels)
        elif self.training:
            outputs = self.image_decoder.lm_head(hidden_states[..., -1, :])
            loss["image_decoder_loss"] = outputs.logits.mean() * 0.0
        return loss
"""


def test_npu703_zero_term_thrown_away() -> None:
    bad = DECODER.replace('loss["image_decoder_loss"] = outputs.logits', "outputs.logits")
    assert _lines("NPU703", bad, SEED) == [8]


def test_npu703_zero_term_recorded_is_quiet() -> None:
    assert _lines("NPU703", DECODER, SEED) == []


TEMPLATE = """
class ToyChatTemplate:
    def render(self, turns, image_token_num_list, video_token_num_list):
        content = ""
        for kind in turns:
            if kind == "image":
                content += self.image_pattern(next(image_token_num_list))
            elif kind == "video":
                content += self.video_pattern(next(video_token_num_list))
        return content
"""


def test_npu719_medium_method_given_another_medium_count() -> None:
    bad = TEMPLATE.replace(
        "self.video_pattern(next(video_token_num_list))", "self.video_pattern(next(image_token_num_list))"
    )
    assert _lines("NPU719", bad, "veomni/data/multimodal/toy_chat_template.py") == [8]


def test_npu719_medium_method_given_own_count_is_quiet() -> None:
    assert _lines("NPU719", TEMPLATE, "veomni/data/multimodal/toy_chat_template.py") == []


NPU_SPEC = """
from veomni.models.transformers.toy_vl.toy_vl_gpu_patch_gen_config import (
    toy_vl_model_forward_patched,
    toy_vl_vision_dummy_forward_patched,
)
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(
    source_module="transformers.models.toy_vl.modeling_toy_vl",
    target_file="patched_modeling_toy_vl_npu.py",
)
config.override_method("ToyVLModel.forward", replacement=toy_vl_model_forward_patched)
config.override_method("ToyVLVisionModel.dummy_forward", replacement=toy_vl_vision_dummy_forward_patched)
"""

NPU_SPEC_PATH = "veomni/models/transformers/toy_vl/toy_vl_npu_patch_gen_config.py"


def test_npu703_imported_dummy_forward_never_registered() -> None:
    bad = NPU_SPEC.replace(
        'config.override_method("ToyVLVisionModel.dummy_forward", replacement=toy_vl_vision_dummy_forward_patched)\n',
        "",
    )
    assert _lines("NPU703", bad, NPU_SPEC_PATH) == [3]


def test_npu703_dummy_forward_registered_is_quiet() -> None:
    assert _lines("NPU703", NPU_SPEC, NPU_SPEC_PATH) == []
