"""Multimodal and packaging contracts generalised from the round-5 dev misses (2026-12-02 early morning): each test
is the defect written in a shape the dev cases and the rule docs do not use (other models, other files, the
generated copy, a helper under veomni/distributed), with the line it must be reported at, and the correct variant
that must stay quiet."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source


def _lines(text: str, code: str, path: str) -> list[int]:
    src = SourceFile.from_text(path, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, [code], Settings()) if d.code == code)


# -- NPU707: a keyword the upstream call to the same submodule passes ------------------------------------------

GENERATED_QWEN2_VL = """
# AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
# Source: transformers.models.qwen2_vl.modeling_qwen2_vl
# Based on: transformers==5.9.0
from torch import nn


class Qwen2VLModel(nn.Module):
    def get_image_features(self, pixel_values, image_grid_thw=None, **kwargs):
        pixel_values = pixel_values.type(self.visual.dtype)
        outputs = self.visual(CALL)
        return outputs
"""
GEN_PATH = "veomni/models/transformers/qwen2_vl/generated/patched_modeling_qwen2_vl_gpu.py"


def test_npu707_generated_class_body_drops_grid_thw() -> None:
    bad = GENERATED_QWEN2_VL.replace("CALL", "pixel_values, **kwargs")
    assert _lines(bad, "NPU707", GEN_PATH) == [10]
    good = GENERATED_QWEN2_VL.replace("CALL", "pixel_values, grid_thw=image_grid_thw, **kwargs")
    assert _lines(good, "NPU707", GEN_PATH) == []


def test_npu707_keyword_passed_by_position_is_not_dropped() -> None:
    positional = GENERATED_QWEN2_VL.replace("CALL", "pixel_values, image_grid_thw")
    assert _lines(positional, "NPU707", GEN_PATH) == []


# -- NPU708: the window's bounds read on the re-bound window -----------------------------------------------------


def test_npu708_distributed_helper_slices_twice() -> None:
    text = """
    def shard_labels(labels, rank, world):
        chunk = labels.size(1) // world
        first = rank * chunk
        last = first + chunk
        labels = labels[:, first:last]
        return labels[:, first:last].contiguous()
    """
    assert _lines(text, "NPU708", "veomni/distributed/sequence_parallel/data.py") == [6]


def test_npu708_window_kept_under_another_name() -> None:
    text = """
    def shard_labels(labels, rank, world):
        chunk = labels.size(1) // world
        first = rank * chunk
        local = labels[:, first : first + chunk]
        skipped = labels[:, :first].ne(-100).sum()
        return local, skipped
    """
    assert _lines(text, "NPU708", "veomni/distributed/sequence_parallel/data.py") == []


# -- NPU709: stacked companions laid out differently --------------------------------------------------------------


def test_npu709_inline_permute_on_one_side_only() -> None:
    text = """
    import torch


    def window_ids(t_ids, h_ids, m):
        t_ids = t_ids.reshape(-1, m, m)
        h_ids = h_ids.reshape(-1, m, m).permute(0, 2, 1)
        return torch.stack((t_ids.flatten(), h_ids.flatten()), dim=0)
    """
    assert _lines(text, "NPU709", "veomni/models/transformers/qwen3_omni_moe/modeling_qwen3_omni_moe.py") == [
        5
    ]


def test_npu709_no_permute_anywhere_is_quiet() -> None:
    text = """
    import torch


    def ids(a, b):
        a = a.reshape(-1)
        return torch.stack([a, b.flatten().reshape(-1)], dim=-1)
    """
    assert (
        _lines(text, "NPU709", "veomni/models/transformers/qwen3_omni_moe/modeling_qwen3_omni_moe.py") == []
    )


def test_npu709_the_same_permutation_spelled_twice_ways_is_quiet() -> None:
    """Round 7's control: `transpose(1, 2)` and `permute(0, 2, 1, 3)` after a 4-d reshape are one layout (and
    `view` is `reshape`); a different permutation is still reported."""
    text = """
    import torch


    def rot_pos_ids(hpos_ids, wpos_ids, h, w, ms):
        hpos_ids = hpos_ids.reshape(h // ms, ms, w // ms, ms).permute(0, 2, 1, 3).flatten()
        wpos_ids = wpos_ids.view(h // ms, ms, w // ms, ms).transpose(1, 2).flatten()
        return torch.stack([hpos_ids, wpos_ids], dim=-1)
    """
    path = "veomni/models/transformers/qwen3_omni_moe/modeling_qwen3_omni_moe.py"
    assert _lines(text, "NPU709", path) == []
    swapped = text.replace("transpose(1, 2)", "transpose(2, 3)")
    assert _lines(swapped, "NPU709", path) == [6]


# -- NPU706: companions of a rank-local sequence; masks from the id shard ----------------------------------------

SPEC = "veomni/models/transformers/glm4v/glm4v_gpu_patch_gen_config.py"


def test_npu706_grid_table_scaled_into_local_patches() -> None:
    text = """
    from veomni.distributed.parallel_state import get_parallel_state
    from veomni.distributed.sequence_parallel import sp_pad_and_slice


    def encode(self, x, thw_grid):
        table = self.abs_pos(thw_grid)
        cos = self.rot(thw_grid)
        if get_parallel_state().sp_enabled:
            cos = sp_pad_and_slice(cos, dim=0, pad_value=0, pad_scale=2)
        x = x - table
        return self.blocks(x, cos)
    """
    assert _lines(text, "NPU706", SPEC) == [10]
    fixed = text.replace(
        "        x = x - table", "        table = sp_pad_and_slice(table, dim=0)\n        x = x - table"
    )
    assert _lines(fixed, "NPU706", SPEC) == []


def test_npu706_placeholder_mask_from_id_shard() -> None:
    text = """
    from veomni.distributed.parallel_state import get_parallel_state
    from veomni.distributed.sequence_parallel import gather_outputs, slice_input_tensor


    def merge(self, input_ids, inputs_embeds, pixel_values_videos):
        group = get_parallel_state().sp_group
        inputs_embeds = gather_outputs(inputs_embeds, gather_dim=1, group=group)
        _, video_mask = self.get_placeholder_mask(input_ids, inputs_embeds=inputs_embeds)
        feats = gather_outputs(self.visual(pixel_values_videos), gather_dim=0, group=group)
        inputs_embeds = inputs_embeds.masked_scatter(video_mask, feats)
        inputs_embeds = slice_input_tensor(inputs_embeds, dim=1, group=group)
        return inputs_embeds
    """
    assert _lines(text, "NPU706", SPEC) == [8]
    after_slice_back = """
    from veomni.distributed.parallel_state import get_parallel_state
    from veomni.distributed.sequence_parallel import gather_outputs, slice_input_tensor


    def merge(self, input_ids, inputs_embeds):
        group = get_parallel_state().sp_group
        inputs_embeds = gather_outputs(inputs_embeds, gather_dim=1, group=group)
        inputs_embeds = slice_input_tensor(inputs_embeds, dim=1, group=group)
        types = input_ids == self.config.video_token_id
        return inputs_embeds, types
    """
    assert _lines(after_slice_back, "NPU706", SPEC) == []


# -- NPU704: the NPU generated module keeps the GPU sibling's position-id methods --------------------------------

SIBLING = """
# AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
# Source: transformers.models.qwen2_5_omni.modeling_qwen2_5_omni
# Based on: transformers==5.9.0
from torch import nn


class Qwen2_5OmniForConditionalGeneration(nn.Module):
    def forward(self, input_ids):
        return self.thinker(input_ids)
POSITION
    def get_metadata_collate_func(self):
        return None
"""
POSITION = """
    def get_position_id_func(self):
        return self.thinker.get_position_id_func()
"""


def test_npu704_npu_sibling_drops_wrapper_position_id_func(tmp_path: Path) -> None:
    gen = tmp_path / "veomni/models/transformers/qwen2_5_omni/generated"
    gen.mkdir(parents=True)
    (gen / "patched_modeling_qwen2_5_omni_gpu.py").write_text(
        SIBLING.replace("POSITION", POSITION).lstrip("\n")
    )
    npu = gen / "patched_modeling_qwen2_5_omni_npu.py"
    dropped = SIBLING.replace("POSITION", "")
    assert _lines(dropped, "NPU704", str(npu)) == [10]
    kept = SIBLING.replace("POSITION", POSITION)
    assert _lines(kept, "NPU704", str(npu)) == []
    # the GPU module itself is not compared with anything
    assert _lines(dropped, "NPU704", str(gen / "patched_modeling_qwen2_5_omni_gpu.py")) == []


# -- NPU732 (NPU503 before 2026-12-04): a text model type resolves to the multimodal wrapper (transformers source known)

INIT = """
from ...loader import MODELING_REGISTRY


@MODELING_REGISTRY.register("qwen3_vl")
def register_qwen3_vl_modeling(architecture: str):
    from .generated.patched_modeling_qwen3_vl_gpu import Qwen3VLForConditionalGeneration

    return Qwen3VLForConditionalGeneration


@MODELING_REGISTRY.register("qwen3_vl_text")
def register_qwen3_vl_text_modeling(architecture: str):
    from .generated.patched_modeling_qwen3_vl_gpu import TEXT_CLASS

    return TEXT_CLASS
"""
GENERATED_QWEN3_VL = """
# AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
# Source: transformers.models.qwen3_vl.modeling_qwen3_vl
# Based on: transformers==5.9.0
from torch import nn


class Qwen3VLTextModel(nn.Module):
    config: Qwen3VLTextConfig


class Qwen3VLForCausalLM(nn.Module):
    config: Qwen3VLTextConfig


class Qwen3VLForConditionalGeneration(nn.Module):
    config: Qwen3VLConfig
"""


SPEC_QWEN3_VL = """
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(
    source_module="transformers.models.qwen3_vl.modeling_qwen3_vl",
    target_file="patched_modeling_qwen3_vl_gpu.py",
)
"""


def _npu503(root: Path, code: str = "NPU732") -> list[dict]:
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "npu_lint",
            "check",
            "--no-cache",
            "--select",
            code,
            "--output-format",
            "json",
            ".",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
        timeout=120,
    )
    assert res.returncode in (0, 1), res.stderr
    return json.loads(res.stdout)


def test_npu732_text_type_returns_the_multimodal_wrapper(tmp_path: Path) -> None:
    pkg = tmp_path / "veomni/models/transformers/qwen3_vl"
    (pkg / "generated").mkdir(parents=True)
    (tmp_path / "veomni/ops").mkdir(parents=True)
    (pkg / "generated/patched_modeling_qwen3_vl_gpu.py").write_text(GENERATED_QWEN3_VL.lstrip("\n"))
    (pkg / "qwen3_vl_gpu_patch_gen_config.py").write_text(SPEC_QWEN3_VL.lstrip("\n"))
    (pkg / "__init__.py").write_text(
        INIT.replace("TEXT_CLASS", "Qwen3VLForConditionalGeneration").lstrip("\n")
    )
    found = [d for d in _npu503(tmp_path) if "a class of the sibling model type" in d["message"]]
    assert [d["location"]["row"] for d in found] == [15], found
    assert "`qwen3_vl_text`" in found[0]["message"] and "`qwen3_vl`" in found[0]["message"]
    assert _npu503(tmp_path, "NPU503") == []  # one model type, one rule: NPU732 owns a VLM's types
    (pkg / "__init__.py").write_text(INIT.replace("TEXT_CLASS", "Qwen3VLForCausalLM").lstrip("\n"))
    assert [d for d in _npu503(tmp_path) if "a class of the sibling model type" in d["message"]] == []


# -- NPU710: a trainer path under a model-type guard exists on each named type's model ----------------------------

TRAINER = """
def unfreeze_deepstack(self, cfg):
    if cfg.model_type == TYPE:
        for module in self.base.model.thinker.visual.merger_list:
            module.requires_grad_(True)
"""


def test_npu710_path_of_one_model_under_another_type() -> None:
    bad = TRAINER.replace("TYPE", '"qwen2_5_omni"')
    assert _lines(bad, "NPU710", "veomni/trainer/omni_trainer.py") == [3]
    good = TRAINER.replace("TYPE", '"qwen3_omni_moe"')
    assert _lines(good, "NPU710", "veomni/trainer/omni_trainer.py") == []


def test_npu710_only_in_trainers() -> None:
    bad = TRAINER.replace("TYPE", '"qwen2_5_omni"')
    assert _lines(bad, "NPU710", "veomni/trainer/omni_trainer.py") == [3]
    assert _lines(bad, "NPU710", "veomni/utils/helper.py") == []
