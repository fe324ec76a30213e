"""HCCL lacks ReduceOp.PREMUL_SUM: reduce with SUM, then scale (the example tree's workaround)."""

import torch
from torch.distributed import ReduceOp


def premul_as_sum(collective, output_name):
    def wrapper(*args, **kwargs):
        factor = None
        # NPU603: KeyError for every call that passes `op` positionally or leaves it at its default
        if kwargs["op"] == ReduceOp.PREMUL_SUM:
            factor = kwargs["op"].__getstate__()[1]
            kwargs["op"] = ReduceOp.SUM
        work = collective(*args, **kwargs)
        if factor is not None:
            out = args[0] if args else kwargs[output_name]
            out.mul_(factor)
        return work

    return wrapper


# NPU605: FSDP2 reduce-scatters gradients with `reduce_scatter_tensor`, which this patch leaves out
def install_premul_patch():
    torch.distributed.all_reduce = premul_as_sum(torch.distributed.all_reduce, "tensor")
    torch.distributed.reduce_scatter = premul_as_sum(torch.distributed.reduce_scatter, "output")
