"""A DCP saver (planted bugs: NPU622 async save on the training group without a drain; NPU623 the EP mesh
sliced to its ep_fsdp dim for checkpoint placement)."""

import torch.distributed.checkpoint as dcp
from torch.distributed.tensor import DTensor, Shard


class ToyAsyncSaver:
    future = None

    @classmethod
    def save(cls, state, writer):
        cls.future = dcp.async_save(state, storage_writer=writer)


def place_expert(local, spec):
    return DTensor.from_local(local, device_mesh=spec.para_fsdp_mesh["ep_fsdp"], placements=[Shard(1)])
