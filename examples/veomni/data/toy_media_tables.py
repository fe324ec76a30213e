"""A toy collate table (planted bug for NPU720)."""

from dataclasses import dataclass


@dataclass
class PackRule:
    dim: int
    sp_slice: bool
    pad_value: int
    pad_scale: int


PACK_RULES = {
    "pixel_values": PackRule(0, True, 0, 4),
    # NPU720: the video patches are padded to another multiple than the image patches
    "pixel_values_videos": PackRule(0, True, 0, 1),
    "image_mask": PackRule(-1, False, 0, 1),
    "video_mask": PackRule(-1, False, 0, 1),
}
