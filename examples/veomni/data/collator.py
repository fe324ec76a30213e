"""The example tree's packing collator (runs as the DataLoader's collate_fn)."""

from dataclasses import dataclass

import torch

from veomni.distributed.parallel_state import get_parallel_state


@dataclass
class PackingCollator:
    pad_multiple: int = 8

    def __call__(self, features):
        input_ids = torch.cat([f["input_ids"] for f in features])
        # NPU610: read in a DataLoader worker, whose parallel state is not the trainer's
        if get_parallel_state().sp_enabled:
            pad = -input_ids.numel() % (self.pad_multiple * get_parallel_state().sp_size)
            input_ids = torch.nn.functional.pad(input_ids, (0, pad))
        return {"input_ids": input_ids.unsqueeze(0)}


IGNORE_INDEX = -100


def pad_labels_to_multiple(batch, multiple):
    """Pads a packed batch's sequence to a multiple of ``multiple`` (the SP degree) before it is split."""
    pad = -batch["input_ids"].size(-1) % multiple
    batch["input_ids"] = torch.nn.functional.pad(batch["input_ids"], (0, pad), value=0)
    # NPU424: the padded label tail is token 0, a real target, where the loss skips only IGNORE_INDEX
    batch["labels"] = torch.nn.functional.pad(batch["labels"], (0, pad), value=0)
    return batch


def mask_sample_boundaries(sample_labels):
    """Masks, in a row of packed samples (labels not shifted yet), the target that crosses into the next sample."""
    for i in range(1, len(sample_labels)):
        # NPU446: each later sample's first label is the crossing one; its last label is a real target
        sample_labels[i][-1] = IGNORE_INDEX
    return sample_labels
