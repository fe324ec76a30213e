"""A VLM forward rebuilding its placeholder masks from the SP-gathered ids (NPU734)."""

import torch
import torch.distributed as dist

from veomni.distributed.parallel_state import get_parallel_state


def placeholder_masks(self, input_ids):
    if get_parallel_state().sp_enabled:
        input_ids_list = [torch.zeros_like(input_ids) for _ in range(get_parallel_state().sp_size)]
        dist.all_gather(input_ids_list, input_ids, group=get_parallel_state().sp_group)
        # NPU734: the sequence shards stacked as batch rows
        input_ids = torch.cat(input_ids_list, dim=0)
    return self.get_placeholder_mask(input_ids)
