"""A checkpointable evaluation loader (planted bug: NPU112 pins memory without naming the device, so torchdata
pins on `torch.cuda.current_device()`, which raises on Ascend)."""

from torchdata.stateful_dataloader import StatefulDataLoader


def build_eval_loader(dataset, batch_size: int, num_workers: int, pin_memory: bool = True):
    return StatefulDataLoader(
        dataset,
        batch_size=batch_size,
        num_workers=num_workers,
        pin_memory=pin_memory,  # NPU112
        persistent_workers=num_workers > 0,
    )
