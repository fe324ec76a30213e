"""NPU724: a model's extra collate info slices a field against the collator table's answer for its role."""

from __future__ import annotations

import textwrap
from pathlib import Path

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source

PATH = "veomni/models/transformers/toy_omni/toy_omni_gpu_patch_gen_config.py"


def _lines(text: str, path: str = PATH) -> list[int]:
    src = SourceFile.from_text(path, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, ["NPU724"], Settings()) if d.code == "NPU724")


def test_payload_left_whole_and_mask_cut() -> None:
    assert _lines(
        """
        def toy_get_extra_collate_infos_patched(self):
            return {
                "speech_features": (0, False, 0.0, 1),
                "speech_lengths": (0, False, None, None),
                "speech_mask": (-1, True, 0, 1),
            }
        """
    ) == [3, 5]


def test_override_of_a_field_the_table_names_is_quiet_unless_it_cuts_what_the_model_reads_whole() -> None:
    # rev13a #13: MainCollator applies the model's rows over the defaults (full_info.update): a row for a field
    # the table names is the override mechanism (pixel_values left whole: quiet); unnamed fields are still
    # compared by role. A grid row cut across ranks (line 2) breaks its consumer whatever the override says:
    # the model splits the gathered media per item and builds the M-RoPE index from the whole grid list.
    assert _lines(
        """
        def get_extra_collate_infos(self):
            infos = {"image_grid_thw": DataCollateInfo(pack_dim=0, sp_slice=True, sp_pad_value=0, sp_pad_scale=1)}
            infos = {"pixel_values": (0, False, 0, 4), "speech_mask": (-1, True, 0, 1)}
            return infos
        """
    ) == [2, 3]


def test_consistent_infos_and_other_functions_are_quiet() -> None:
    assert (
        _lines(
            """
        def get_extra_collate_infos(self):
            return {
                "input_features": (0, True, 0, 1),
                "audio_mask": (-1, False, 0, 1),
                "audio_feature_lengths": (0, False, None, None),
                "odd": (1, True, 0, 1),
            }


        def shapes(self):
            return {"audio_mask": (-1, True, 0, 1)}
        """
        )
        == []
    )


def test_the_trees_own_table_is_the_reference(tmp_path: Path) -> None:
    data = tmp_path / "veomni" / "data"
    data.mkdir(parents=True)
    (data / "data_collator.py").write_text(
        "DEFAULT_DATA_COLLATE_INFO = {\n"
        '    "image_mask": DataCollateInfo(-1, True, 0, 1),\n'
        '    "video_mask": DataCollateInfo(-1, True, 0, 1),\n'
        "}\n"
    )
    path = str(tmp_path / "veomni" / "models" / "transformers" / "toy" / "toy_gpu_patch_gen_config.py")
    text = """
        def get_extra_collate_infos(self):
            return {"audio_mask": (-1, True, 0, 1), "frame_mask": (-1, False, 0, 1)}
        """
    assert _lines(text, path) == [2]  # this tree cuts its masks: the uncut one is the odd one out


def test_a_tree_without_a_collator_table_is_not_judged_by_the_shipped_one(tmp_path: Path) -> None:
    # a partial tree (the VeomniOp corpus has no veomni/data) or one whose collator lives elsewhere: the fields and
    # answers of VeOmni main's table are not this tree's, so the rule says nothing rather than cite a catalog
    (tmp_path / "veomni" / "models").mkdir(parents=True)
    path = str(
        tmp_path / "veomni" / "models" / "transformers" / "toy_omni" / "toy_omni_gpu_patch_gen_config.py"
    )
    text = """
        def toy_get_extra_collate_infos_patched(self):
            return {"speech_mask": (-1, True, 0, 1)}
        """
    assert _lines(text) == [2]  # outside any tree on disk: main's contract (masks uncut) is the reference
    assert _lines(text, path) == []
