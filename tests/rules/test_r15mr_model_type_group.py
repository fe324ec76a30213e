"""NPU729: a model-type test naming part of a group the module tests together elsewhere; in trainers, data
transforms, model builders and checkpoint converters, with literal groups and module constants; refinements,
per-type handling and groups tested once are quiet."""

from __future__ import annotations

import textwrap

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source


def _lines(code: str, path: str) -> list[int]:
    src = SourceFile.from_text(path, textwrap.dedent(code).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, ["NPU729"], Settings()) if d.code == "NPU729")


BAD = [
    (
        "veomni/data/multimodal/toy_transform.py",
        """
        def build_transform(model_type, processor):
            if model_type in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl"):
                processor.image_processor.merge_size = 2
            steps = []
            if model_type in ("qwen2_vl", "qwen2_5_vl"):
                steps.append("mrope")
            if model_type not in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl"):
                steps.append("plain")
            return steps
        """,
    ),
    (
        "veomni/models/toy_auto.py",
        """
        OMNI = ("qwen2_5_omni", "qwen3_omni_moe")


        def build(config):
            if config.model_type in OMNI:
                config.enable_audio_output = False
            model = make(config)
            if config.model_type == "qwen3_omni_moe":
                model.thinker.freeze()
            if config.model_type in OMNI:
                model.disable_talker()
            return model
        """,
    ),
    (
        "veomni/checkpoint/toy_convert.py",
        """
        def convert(state, model_type):
            if model_type in {"deepseek_v3", "kimi_k2", "glm_moe_dsa"}:
                state = fuse_experts(state)
            prefix = "model." if model_type in ("deepseek_v3", "kimi_k2") else ""
            if model_type in {"deepseek_v3", "kimi_k2", "glm_moe_dsa"}:
                state = rename_router(state, prefix)
            return state
        """,
    ),
]

GOOD = [
    (
        "veomni/trainer/toy_trainer.py",
        """
        def freeze(self, model_type):
            if model_type in ("qwen2_5_omni", "qwen3_omni_moe"):
                if model_type == "qwen3_omni_moe":
                    self.model.thinker.audio_tower.proj1.requires_grad_(True)
            if model_type in ("qwen2_5_omni", "qwen3_omni_moe"):
                self.model.disable_talker()
        """,
    ),
    (
        "veomni/data/multimodal/toy_transform.py",
        """
        def build_transform(model_type):
            if model_type in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl"):
                a = 1
            if model_type in ("qwen2_vl", "qwen2_5_vl"):
                a = 2
            elif model_type == "qwen3_vl":
                a = 3
            if model_type in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl"):
                a += 1
            return a
        """,
    ),
    (
        "veomni/models/toy_auto.py",
        """
        def build(config):
            if config.model_type in ("qwen2_5_omni", "qwen3_omni_moe"):
                config.enable_audio_output = False
            if config.model_type == "qwen3_omni_moe":
                return 1
            return 0
        """,
    ),
]


@pytest.mark.parametrize(("path", "code"), BAD)
def test_part_of_a_group_is_reported(path: str, code: str) -> None:
    assert len(_lines(code, path)) == 1


@pytest.mark.parametrize(("path", "code"), GOOD)
def test_whole_groups_refinements_and_per_type_handling_are_quiet(path: str, code: str) -> None:
    assert _lines(code, path) == []
