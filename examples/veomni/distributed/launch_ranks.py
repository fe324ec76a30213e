"""Process setup (planted bugs: NPU620 per-node identity from the global rank, NPU621 a rank-0-only barrier)."""

import os

import torch.distributed as dist


class ToyLaunch:
    def __init__(self):
        self.local_rank = int(os.environ.get("RANK", "0"))
        self.global_rank = int(os.environ.get("RANK", "0"))


def fetch_tracker(src, dst, is_rank0):
    if is_rank0:
        copy_file(src, dst)
        dist.barrier()
    return os.path.exists(dst)


def copy_file(src, dst):
    with open(src) as fin, open(dst, "w") as fout:
        fout.write(fin.read())
