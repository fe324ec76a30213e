"""Round 9 (dev9-r9sem) contracts, each written the way other engineers would: the one ignore index for every label
fill, mask and count (NPU424), labels shifted exactly once and the right way (NPU412), labels cut and masked like
their token ids (NPU436), and per-medium bookkeeping kept for every medium a function holds (NPU719). Each test
states the lines that must be reported; the quiet variants are the same code written correctly."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source


def _lines(code: str, text: str, path: str) -> list[int]:
    src = SourceFile.from_text(path, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, [code], Settings()) if d.code == code)


# -- NPU424: one ignore index ------------------------------------------------------------------------------------

FILLS = """
import torch

from veomni.utils.constants import IGNORE_INDEX as IGN


def chat(tok, turns):
    ids, labels = [], []
    for t in turns:
        piece = tok.encode(t["text"])
        ids += piece
        labels += piece if t["learn"] else len(piece) * [tok.pad_token_id]
    return ids, labels


def classify(seq, label_id):
    cls_labels = torch.zeros(len(seq), dtype=torch.long)
    cls_labels[-1] = label_id
    return cls_labels


def n_targets(mb):
    total = 0
    for k in mb:
        if k.endswith("labels"):
            total += (mb[k] != 0).sum()
    return total


def response_mask(seq_labels):
    return seq_labels.ne(0)
"""


def test_npu424_fill_variants() -> None:
    assert _lines("NPU424", FILLS, "veomni/data/toy_transform.py") == [11, 16, 25, 30]


def test_npu424_fill_quiet_when_the_ignore_index_is_used() -> None:
    fixed = (
        FILLS.replace("len(piece) * [tok.pad_token_id]", "len(piece) * [IGN]")
        .replace("torch.zeros(len(seq), dtype=torch.long)", "torch.full((len(seq),), IGN, dtype=torch.long)")
        .replace("mb[k] != 0", "mb[k] != IGN")
        .replace("seq_labels.ne(0)", "seq_labels.ne(IGN)")
    )
    assert _lines("NPU424", fixed, "veomni/data/toy_transform.py") == []


def test_npu424_new_checks_need_the_trees_ignore_constant() -> None:
    # transformers' processors convert pad to -100 by hand and use label values of their own: without the tree's
    # ignore-index constant the stretch, background and mask checks stay off
    plain = FILLS.replace("from veomni.utils.constants import IGNORE_INDEX as IGN\n", "")
    assert _lines("NPU424", plain, "veomni/data/toy_transform.py") == []


# -- NPU412: shifted once, the right way -------------------------------------------------------------------------

SHIFTS = """
import torch.nn.functional as F


def collate_shift(mb, ignore=-100):
    lab = mb["labels"]
    mb["labels"] = F.pad(lab[:, :-1], pad=(1, 0), value=ignore)
    return mb


def _targets(labels, seq_lens, use_sp):
    if use_sp:
        return list(labels.split(seq_lens))
    return [F.pad(x[1:], (0, 1), value=-100) for x in labels.split(seq_lens)]


def logps(model, mb, state):
    sp_enabled = state.sp_enabled
    out = model(**mb)
    return out, _targets(mb["labels"], mb["seq_lens"], use_sp=True if not sp_enabled else True)


def logps_const(model, mb, state):
    sp_enabled = state.sp_enabled
    out = model(**mb)
    return out, _targets(mb["labels"], mb["seq_lens"], use_sp=False), sp_enabled
"""


def test_npu412_shift_variants() -> None:
    assert _lines("NPU412", SHIFTS, "veomni/trainer/toy_trainer.py") == [6, 25]


def test_npu412_shift_quiet_variants() -> None:
    fixed = SHIFTS.replace(
        "F.pad(lab[:, :-1], pad=(1, 0), value=ignore)", "F.pad(lab, (0, 1), value=ignore)[:, 1:]"
    )
    fixed = fixed.replace("use_sp=False), sp_enabled", "use_sp=sp_enabled), sp_enabled")
    assert _lines("NPU412", fixed, "veomni/trainer/toy_trainer.py") == []


# -- NPU436: labels cut and masked like the ids ------------------------------------------------------------------

ALIGN = """
from veomni.utils.constants import IGNORE_INDEX


def clip(sample, limit):
    input_ids = sample["input_ids"]
    labels = sample["labels"]
    input_ids = input_ids[:limit]
    labels = labels[-limit:]
    return {"input_ids": input_ids, "labels": labels}


def preference(tok, q, a, b):
    n = len(tok(q))
    a_ids, b_ids = tok(q + a), tok(q + b)
    chosen = dict()
    rejected = {"input_ids": b_ids, "labels": b_ids[:]}
    chosen = {"input_ids": a_ids, "labels": [IGNORE_INDEX] * n + a_ids[n:]}
    return chosen, rejected
"""


def test_npu436_variants() -> None:
    assert _lines("NPU436", ALIGN, "veomni/data/toy_transform.py") == [8, 16]


def test_npu436_quiet_variants() -> None:
    fixed = ALIGN.replace("labels = labels[-limit:]", "labels = labels[:limit]").replace(
        '"labels": b_ids[:]', '"labels": [IGNORE_INDEX] * n + b_ids[n:]'
    )
    assert _lines("NPU436", fixed, "veomni/data/toy_transform.py") == []


# -- NPU719: every medium's bookkeeping --------------------------------------------------------------------------

MEDIA = """
IMG_IDX, VID_IDX, AUD_IDX = -200, -201, -202


def transform(ids, vis, aud, pos_fn, image_grid_thw, video_grid_thw, audio_seqlens):
    feats = {}
    feats["image_mask"] = ids == IMG_IDX
    feats["video_mask"] = ids == IMG_IDX
    feats["audio_mask"] = ids == AUD_IDX
    types = ids.new_zeros(ids.shape)
    types[feats["image_mask"]] = 1
    types[feats["audio_mask"]] = 3
    ids[feats["image_mask"] | feats["video_mask"]] = 0
    feats["position_ids"] = pos_fn(ids, image_grid_thw=image_grid_thw, audio_seqlens=audio_seqlens)
    feats.update(vis)
    return feats


class Merge:
    def forward(self, embeds, image_mask, video_mask, video_rows, pixel_values_videos):
        if pixel_values_videos is not None:
            embeds = embeds.masked_scatter(image_mask.unsqueeze(-1), video_rows)
        return embeds
"""


def test_npu719_variants() -> None:
    # 7: the video mask from the image marker; 10/11: no video token type (next to the image's and the audio's); 12: the audio placeholders kept;
    # 13: no video grid passed; 21: the video block scatters at the image mask
    assert _lines("NPU719", MEDIA, "veomni/data/toy_omni.py") == [7, 10, 11, 12, 13, 21]


def test_npu719_quiet_variants() -> None:
    fixed = (
        MEDIA.replace('feats["video_mask"] = ids == IMG_IDX', 'feats["video_mask"] = ids == VID_IDX')
        .replace(
            '    types[feats["audio_mask"]] = 3\n',
            '    types[feats["video_mask"]] = 2\n    types[feats["audio_mask"]] = 3\n',
        )
        .replace(
            'feats["image_mask"] | feats["video_mask"]]',
            'feats["image_mask"] | feats["video_mask"] | feats["audio_mask"]]',
        )
        .replace(
            "image_grid_thw=image_grid_thw, audio",
            "image_grid_thw=image_grid_thw, video_grid_thw=video_grid_thw, audio",
        )
        .replace("masked_scatter(image_mask.unsqueeze", "masked_scatter(video_mask.unsqueeze")
    )
    assert _lines("NPU719", fixed, "veomni/data/toy_omni.py") == []


def test_npu719_same_marker_for_two_media() -> None:
    code = """
def token_types(ids, masks):
    kinds = ids.new_zeros(ids.shape)
    kinds[masks["img_mask"]] = 1
    kinds[masks["vid_mask"]] = 1
    ids[masks["img_mask"]] = 0
    ids[masks["vid_mask"]] = 0
    return kinds, ids
"""
    assert _lines("NPU719", code, "veomni/data/toy_types.py") == [4]
    assert (
        _lines("NPU719", code.replace('["vid_mask"]] = 1', '["vid_mask"]] = 2'), "veomni/data/toy_types.py")
        == []
    )


# -- NPU720: per-medium tables -----------------------------------------------------------------------------------

TABLES = """
from collections import namedtuple

Spec = namedtuple("Spec", "dim shard fill scale")

SPECS = {
    "input_ids": Spec(-1, True, 0, 1),
    "image_mask": Spec(-1, False, 0, 1),
    "video_mask": Spec(-1, True, 0, 1),
    "pixel_values": (0, True, 0, 4),
    "pixel_values_videos": (0, True, 0, 4),
}


def sp_pads(batch):
    counts = {"pixel_values_videos": 0}
    return counts


def report(batch, hook):
    hook(batch, {"pixel_values": 0, "pixel_values_videos": 0})
"""


def test_npu720_variants() -> None:
    # 8: the video mask sharded where the image mask is not; 15: the image pad count missing
    assert _lines("NPU720", TABLES, "veomni/data/toy_specs.py") == [8, 15]


def test_npu720_quiet_variants() -> None:
    fixed = TABLES.replace(
        '"video_mask": Spec(-1, True, 0, 1)', '"video_mask": Spec(-1, False, 0, 1)'
    ).replace('{"pixel_values_videos": 0}', '{"pixel_values": 0, "pixel_values_videos": 0}')
    assert _lines("NPU720", fixed, "veomni/data/toy_specs.py") == []


RECORDS = """
from veomni.data.collate_info import Info

from dataclasses import dataclass


@dataclass
class Local:
    dim: int
    shard: bool
    fill: int
    scale: int


IMPORTED = {
    "pixel_values": Info(dim=0, shard=True, fill=0, scale=4),
    "pixel_values_videos": Info(0, True, 0, 4),
}
LOCAL = {
    "pixel_values": Local(dim=0, shard=True, fill=0, scale=4),
    "pixel_values_videos": Local(0, True, 0, 4),
}
"""


def test_npu720_reads_records_by_field_not_by_spelling() -> None:
    """The same values by keyword and by position are one record (a held-out control of round 9 was reported:
    `DataCollateInfo(pack_dim=0, ...)` beside `DataCollateInfo(0, ...)`); with the record type's fields known (a
    class of the file), a keyword that binds another value is still reported."""
    assert _lines("NPU720", RECORDS, "veomni/data/toy_records.py") == []
    changed = RECORDS.replace(
        '"pixel_values": Local(dim=0, shard=True, fill=0, scale=4)',
        '"pixel_values": Local(dim=0, shard=True, fill=0, scale=2)',
    )
    assert _lines("NPU720", changed, "veomni/data/toy_records.py") == [20]


# -- NPU721: the SP dummy grid scaled with its companions --------------------------------------------------------

GRIDS = """
def fake_image(self, ps, meta):
    sp_size = ps.sp_size if ps.sp_enabled else 1
    thw = [1, 2, 2 * self.merge]
    return self.vision(self.zeros(thw), thw=thw, meta=meta(1, 2 * sp_size, 2 * self.merge))


def fake_width(self, ps):
    if ps.sp_enabled:
        w = self.merge * 2
    else:
        w = self.merge * 2
    return w
"""


def test_npu721_variants() -> None:
    assert _lines("NPU721", GRIDS, "veomni/models/toy/modeling_toy.py") == [3, 8]


def test_npu721_quiet_variants() -> None:
    fixed = GRIDS.replace("thw = [1, 2, 2 * self.merge]", "thw = [1, 2 * sp_size, 2 * self.merge]").replace(
        "    if ps.sp_enabled:\n        w = self.merge * 2",
        "    if ps.sp_enabled:\n        w = self.merge * 2 * ps.sp_size",
    )
    assert _lines("NPU721", fixed, "veomni/models/toy/modeling_toy.py") == []


# -- NPU412 with the tree's SP collator: one shift per setting ---------------------------------------------------

SP_COLLATOR = """
import torch.nn.functional as F


class SequenceParallelCollator:
    def __call__(self, batch):
        labels = batch["labels"][..., 1:].contiguous()
        batch["labels"] = F.pad(labels, (0, 1), "constant", -100)
        return batch
"""

SEGMENTS = """
import torch.nn.functional as F


def segment_targets(flat_labels, lens, sp_enabled):
    target_labels, start = [], 0
    if sp_enabled:
        for n in lens:
            seg = flat_labels[start : start + n].clone()
            seg[-1] = -100
            target_labels.append(seg)
            start += n
    else:
        for n in lens:
            target_labels.append(flat_labels[start : start + n])
            start += n
    return target_labels


def channel_targets(labels, state):
    sp_enabled = state.sp_enabled
    effective = F.pad(labels, (0, 1), value=-100)[..., 1:]
    return effective, sp_enabled
"""


def _tree_lines(tmp_path, text: str) -> list[int]:
    from npu_lint.veomni.project import Project

    for rel, body in (
        ("veomni/utils/constants.py", "IGNORE_INDEX = -100\n"),
        ("veomni/data/data_collator.py", SP_COLLATOR),
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(textwrap.dedent(body).lstrip("\n"), encoding="utf-8")
    path = tmp_path / "veomni/trainer/toy_pairs.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    src = SourceFile.from_text(str(path), path.read_text(encoding="utf-8"))
    diags = lint_source(src, ["NPU412"], Settings(), Project(root=str(tmp_path)))
    return sorted(d.line for d in diags if d.code == "NPU412")


def test_npu412_one_shift_per_setting(tmp_path) -> None:
    # 14: the non-SP segments handed on unshifted; 21: a shift that also runs under SP
    assert _tree_lines(tmp_path, SEGMENTS) == [14, 21]


def test_npu412_one_shift_per_setting_quiet(tmp_path) -> None:
    fixed = SEGMENTS.replace(
        "target_labels.append(flat_labels[start : start + n])",
        "seq_labels = flat_labels[start : start + n]\n            "
        "target_labels.append(F.pad(seq_labels[1:], (0, 1), value=-100))",
    ).replace(
        "    effective = F.pad(labels, (0, 1), value=-100)[..., 1:]\n",
        "    if sp_enabled:\n        effective = labels\n    else:\n        effective = F.pad(labels, (0, 1), value=-100)[..., 1:]\n",
    )
    assert _tree_lines(tmp_path, fixed) == []
