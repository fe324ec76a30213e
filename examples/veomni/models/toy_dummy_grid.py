"""A toy dummy vision input (planted bug for NPU721)."""

import torch


def dummy_vision_inputs(row_size, sp_enabled, sp_size, metadata_fn):
    if sp_enabled:
        pixels = torch.zeros((16, row_size))
        # NPU721: the grid keeps the single-rank height while the metadata scales it
        grid = torch.tensor([[1, 4, 4]], dtype=torch.int32)
        metadata = metadata_fn(1, 4 * sp_size, 4)
    else:
        pixels = torch.zeros((16, row_size))
        grid = torch.tensor([[1, 4, 4]], dtype=torch.int32)
        metadata = metadata_fn(1, 4, 4)
    return pixels, grid, metadata
