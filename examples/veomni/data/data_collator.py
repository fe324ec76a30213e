"""The toy tree's collator table: how each batch field is packed and whether sequence parallelism cuts it."""

from dataclasses import dataclass

IGNORE_INDEX = -100


@dataclass(frozen=True)
class DataCollateInfo:
    pack_dim: int
    sp_slice: bool
    sp_pad_value: int | None
    sp_pad_scale: int | None


DEFAULT_DATA_COLLATE_INFO = {
    "input_ids": DataCollateInfo(-1, True, 0, 1),
    "labels": DataCollateInfo(-1, True, IGNORE_INDEX, 1),
    "attention_mask": DataCollateInfo(-1, False, 1, 1),
    "position_ids": DataCollateInfo(-1, False, 0, 1),
    "pixel_values": DataCollateInfo(0, True, 0, 4),
    "pixel_values_videos": DataCollateInfo(0, True, 0, 4),
    "image_mask": DataCollateInfo(-1, False, 0, 1),
    "video_mask": DataCollateInfo(-1, False, 0, 1),
    "image_grid_thw": DataCollateInfo(0, False, None, None),
    "video_grid_thw": DataCollateInfo(0, False, None, None),
}
