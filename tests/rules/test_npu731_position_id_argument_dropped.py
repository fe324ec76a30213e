"""NPU731: a call of the model's position-id function leaves out a media argument the function it reaches indexes
without a None check. Transfer variants of the round-19 dev miss (the Qwen-Omni data transform dropping
`second_per_grids`): other files and regions (a collator module, a shared transform body, a spec's forward, a
generated file's own method, a seed_omni model), other arguments (`audio_seqlens`), and the correct variants that
stay quiet (a parameter with a None fallback, a spread, a text-only call, a model whose function takes no such
argument, arguments passed by position)."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source


def _lines(text: str, path: str) -> list[int]:
    src = SourceFile.from_text(path, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, ["NPU731"], Settings()) if d.code == "NPU731")


TRANSFORM = """
from veomni.data.registry import DATA_TRANSFORM_REGISTRY


@DATA_TRANSFORM_REGISTRY.register("MODEL_TYPE")
def encode_omni_sample(sample, processor, position_id_func, **kwargs):
    batch = processor(text=sample["text"], videos=sample.get("videos"), return_tensors="pt").data
    lengths = batch.pop("audio_lengths", None)
    out = position_id_func(
        input_ids=batch["input_ids"],
        image_grid_thw=batch.get("image_grid_thw"),
        video_grid_thw=batch.get("video_grid_thw"),
        attention_mask=batch["attention_mask"],
        ARGS
    )
    batch["position_ids"] = out["position_ids"]
    return [batch]
"""
COLLATE_PATH = "veomni/data/multimodal/omni_collate.py"


def _transform(model_type: str, args: str) -> str:
    return TRANSFORM.replace("MODEL_TYPE", model_type).replace("ARGS", args)


def test_transform_of_qwen3_omni_drops_audio_seqlens() -> None:
    bad = _transform("qwen3_omni_moe", 'second_per_grids=batch.get("video_second_per_grid"),')
    assert _lines(bad, COLLATE_PATH) == [13]  # the last argument, where the missing one belongs
    good = _transform(
        "qwen3_omni_moe", 'second_per_grids=batch.get("video_second_per_grid"), audio_seqlens=lengths,'
    )
    assert _lines(good, COLLATE_PATH) == []


def test_transform_of_qwen2_5_omni_drops_second_per_grids() -> None:
    bad = _transform("qwen2_5_omni", "audio_seqlens=lengths,")
    assert _lines(bad, "veomni/data/omni_transform.py") == [13]


def test_truly_optional_parameter_and_other_models_stay_quiet() -> None:
    # Qwen2.5-VL's get_rope_index falls back when second_per_grid_ts is None; Qwen3-VL takes no such argument
    for model_type in ("qwen2_5_vl", "qwen3_vl", "qwen2_vl"):
        assert _lines(_transform(model_type, "mm_token_type_ids=None,"), COLLATE_PATH) == []
    # a spread may carry the argument
    spread = _transform("qwen3_omni_moe", "**batch.get('extra', {}),")
    assert _lines(spread, COLLATE_PATH) == []
    # unregistered: nothing known about the function
    assert _lines(_transform("qwen3_omni_moe", "").replace("@DATA_TRANSFORM", "# @DATA"), COLLATE_PATH) == []


def test_shared_body_of_a_registered_transform() -> None:
    src = """
    from veomni.data.registry import DATA_TRANSFORM_REGISTRY


    def _omni_positions(batch, position_id_func):
        return position_id_func(
            input_ids=batch["input_ids"],
            video_grid_thw=batch.get("video_grid_thw"),
            audio_seqlens=batch.get("audio_feature_lengths"),
        )


    @DATA_TRANSFORM_REGISTRY.register("qwen2_5_omni")
    def process_omni(sample, processor, position_id_func, **kwargs):
        batch = processor(sample)
        batch["position_ids"] = _omni_positions(batch, position_id_func)["position_ids"]
        return [batch]
    """
    assert _lines(src, "veomni/data/transforms/omni.py") == [8]


SPEC = """
import torch
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.qwen2_5_omni.modeling_qwen2_5_omni", target_file="x.py")


@config.override_method("Qwen2_5OmniThinkerForConditionalGeneration.forward")
def thinker_forward(self, input_ids, attention_mask=None, image_grid_thw=None, video_grid_thw=None,
                    feature_attention_mask=None, video_second_per_grid=None, **kwargs):
    audio_feature_lengths = torch.sum(feature_attention_mask, dim=1)
    position_ids, rope_deltas = self.get_rope_index(
        input_ids,
        image_grid_thw,
        video_grid_thw,
        attention_mask,
        ARGS
    )
    return position_ids
"""


def test_spec_forward_reaches_the_upstream_method() -> None:
    path = "veomni/models/transformers/qwen2_5_omni/qwen2_5_omni_npu_patch_gen_config.py"
    bad = SPEC.replace("ARGS", "False, audio_feature_lengths")
    assert _lines(bad, path) == [16]
    good = SPEC.replace("ARGS", "False, audio_feature_lengths, video_second_per_grid")
    assert _lines(good, path) == []
    keywords = SPEC.replace(
        "ARGS", "audio_seqlens=audio_feature_lengths, second_per_grids=video_second_per_grid"
    )
    assert _lines(keywords, path) == []


GENERATED = """
# AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
# Source: transformers.models.toy_omni.modeling_toy_omni
import torch


class ToyOmniModel:
    def get_rope_index(self, input_ids, video_grid_thw=None, audio_seqlens=None, audio_chunk_tokens=None):
        if audio_chunk_tokens is None:
            audio_chunk_tokens = 25
        out = []
        for audio_idx, grid in enumerate(video_grid_thw):
            out.append(torch.arange(int(grid[0])) + audio_seqlens[audio_idx] + audio_chunk_tokens)
        return out

    def forward(self, input_ids, video_grid_thw=None, audio_lengths=None):
        return self.get_rope_index(input_ids, video_grid_thw=video_grid_thw, ARGS)
"""


def test_generated_file_own_method() -> None:
    path = "veomni/models/transformers/toy_omni/generated/patched_modeling_toy_omni_gpu.py"
    assert _lines(GENERATED.replace("ARGS", "audio_chunk_tokens=10"), path) == [16]
    assert _lines(GENERATED.replace("ARGS", "audio_seqlens=audio_lengths"), path) == []


def test_seed_omni_unbound_call_and_text_only_call() -> None:
    src = """
    class OmniPositioner:
        def get_rope_index(self, input_ids, image_grid_thw=None, media_seconds=None):
            return [g[0] * media_seconds[i] for i, g in enumerate(image_grid_thw)]


    def positions(fake, input_ids, grids, seconds):
        a = OmniPositioner.get_rope_index(fake, input_ids, grids)
        b = OmniPositioner.get_rope_index(fake, input_ids, grids, seconds)
        c = OmniPositioner.get_rope_index(fake, input_ids)
        return a, b, c
    """
    assert _lines(src, "veomni/models/seed_omni/positions.py") == [7]


SPREAD = """
from veomni.data.registry import DATA_TRANSFORM_REGISTRY


@DATA_TRANSFORM_REGISTRY.register("qwen3_vl_moe")
def encode_vl_sample(sample, processor, position_id_func):
    enc = processor(sample)
    call_kwargs = {"input_ids": enc["input_ids"], "image_grid_thw": enc.get("image_grid_thw")}
    call_kwargs["video_grid_thw"] = enc.get("video_grid_thw")
    EXTRA
    enc["position_ids"] = position_id_func(**call_kwargs)["position_ids"]
    return [enc]
"""


def test_required_argument_missing_from_a_mapping_built_in_the_transform() -> None:
    path = "veomni/data/multimodal/vl_transform.py"
    # transformers 5.9's Qwen3-VL-MoE get_rope_index requires mm_token_type_ids
    assert _lines(SPREAD.replace("EXTRA", "pass"), path) == [10]
    good = SPREAD.replace("EXTRA", 'call_kwargs["mm_token_type_ids"] = enc["mm_token_type_ids"]')
    assert _lines(good, path) == []
    # the mapping is updated from elsewhere: it may hold anything
    opaque = SPREAD.replace("EXTRA", "call_kwargs.update(enc.extra)")
    assert _lines(opaque, path) == []
