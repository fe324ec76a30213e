"""Position-id keyword mapping of a toy foundation model (demo)."""


def parse_position_id_kwargs(input_ids, attention_mask, grid_thw=None, **kwargs):
    grid_thw = grid_thw or {}
    out = {"input_ids": input_ids, "attention_mask": attention_mask}
    if "image" in grid_thw:
        out["image_grid_thw"] = grid_thw["image"]
    if "video" in grid_thw:
        # NPU701: the video grids are read under the image key
        out["video_grid_thw"] = grid_thw["image"]
    return out
