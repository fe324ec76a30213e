"""NPU725 (a collated field popped out of the returned sample) and NPU726 (M-RoPE rows lost)."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source

DATA = "veomni/data/toy_transform.py"
SPEC = "veomni/models/transformers/toy_omni/toy_omni_gpu_patch_gen_config.py"


def _lines(text: str, code: str, path: str) -> list[int]:
    src = SourceFile.from_text(path, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, [code], Settings()) if d.code == code)


def test_popped_video_grid_in_a_returned_dict() -> None:
    text = """
        def transform(sample, processor, rope):
            inputs = processor(sample)
            grid = inputs.pop("video_grid_thw")
            extra = inputs.pop("video_second_per_grid", None)
            feats = inputs.pop("input_features", None)
            inputs["input_features"] = feats
            inputs["position_ids"] = rope(grid, extra)
            return inputs
        """
    assert _lines(text, "NPU725", DATA) == [3]


def test_pop_from_a_dict_not_returned_or_outside_the_data_pipeline() -> None:
    text = """
        def transform(sample, processor):
            inputs = processor(sample)
            grid = inputs.pop("video_grid_thw")
            return {"grid": grid}
        """
    assert _lines(text, "NPU725", DATA) == []
    model = """
        def prepare(model_inputs):
            model_inputs.pop("position_ids")
            return model_inputs
        """
    assert _lines(model, "NPU725", "veomni/models/transformers/toy/modeling_toy.py") == []


def test_rope_index_result_cut_to_one_row() -> None:
    text = """
        def forward(self, input_ids, grid):
            position_ids, deltas = self.get_rope_index(input_ids, grid)
            first = position_ids[0]
            kept = position_ids[:, 0]
            return first, kept, deltas
        """
    assert _lines(text, "NPU726", SPEC) == [3]


def test_text_row_kept_among_rotary_rows() -> None:
    text = """
        def forward(self, hidden, position_ids):
            text_positions = position_ids[0]
            rotary = self.rotary(hidden, position_ids[0:3])
            again = position_ids[1:4]
            return text_positions, rotary, again
        """
    assert _lines(text, "NPU726", SPEC) == [3]


def test_moved_rebound_and_discarded_pops_are_quiet() -> None:
    # rev13a #7: a field moved under another key, a dict rebuilt under the same name, an optional removal
    text = """
        def single_frame_video_as_image(sample):
            if sample["video_grid_thw"][0, 0] == 1:
                sample["pixel_values"] = sample.pop("pixel_values_videos")
                sample["image_grid_thw"] = sample.pop("video_grid_thw")
            return sample


        def cast_grid(sample):
            grid = sample.pop("image_grid_thw")
            sample = {**sample, "image_grid_thw": grid.long()}
            return sample


        def drop_text_only_masks(sample, has_image):
            if not has_image:
                sample.pop("image_mask", None)
            return sample


        def still_lost(sample, rope):
            sample["position_ids"] = rope(sample.pop("image_grid_thw", None))
            return sample
        """
    assert _lines(text, "NPU725", DATA) == [21]


def test_cut_inside_a_closure_is_reported_once() -> None:
    # rev13a #14: the outer visit's walk already covers the nested function
    text = """
        def outer(self, input_ids, grid):
            def inner():
                position_ids, deltas = self.get_rope_index(input_ids, grid)
                return position_ids[0], deltas
            return inner()
        """
    src = SourceFile.from_text(SPEC, textwrap.dedent(text).lstrip("\n"))
    diags = [d for d in lint_source(src, ["NPU726"], Settings()) if d.code == "NPU726"]
    assert [(d.line, d.col) for d in diags] == [(4, 15)]


def test_position_id_producers_are_named_by_the_semantic_model() -> None:
    from npu_lint.veomni.upcalls import is_position_id_function

    assert [
        is_position_id_function(n)
        for n in ("get_rope_index", "position_id_func", "get_position_ids", "get_position_embeddings", "rope")
    ] == [True, True, True, False, False]
