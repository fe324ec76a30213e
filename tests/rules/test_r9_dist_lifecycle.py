"""Distributed / checkpoint / process-lifecycle contracts (session r9dist): NPU619-NPU623, NPU108, NPU109.

Each rule is asked about variants another engineer would write for the same defect (renamed, moved into a helper,
keyword vs positional, condition inverted, an alias import) and about correct forms that must stay quiet."""

from __future__ import annotations

import textwrap

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source


def _lines(code: str, text: str, path: str = "veomni/distributed/toy.py") -> list[int]:
    src = SourceFile.from_text(path, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, [code], Settings()) if d.code == code)


# ---------------------------------------------------------------- NPU619 given-group-ignored

NPU619_BAD = [
    # the job's world size in a helper given an EP group (keyword group)
    """
    import torch.distributed as dist


    def dispatch_tokens(x, ep_group=None):
        n = dist.get_world_size()
        return x.chunk(n), ep_group
    """,
    # the global state's size through an alias import, positional group parameter
    """
    from veomni.distributed.parallel_state import get_parallel_state as current


    def scatter_heads(q, process_group):
        heads = q.shape[2] // current().ulysses_size
        return heads, process_group
    """,
    # a local bound to the state, then its rank, in the non-fallback branch
    """
    from veomni.distributed.parallel_state import get_parallel_state


    def keep_my_chunk(x, group=None):
        ps = get_parallel_state()
        if group is not None:
            return x.chunk(4)[ps.sp_rank]
        return x
    """,
    # a backward reading the ambient getter its forward's group should have fixed
    """
    import torch

    from veomni.distributed.sequence_parallel.comm import get_ulysses_sequence_parallel_rank


    class Slice(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, group):
            return x

        @staticmethod
        def backward(ctx, grad):
            return grad * get_ulysses_sequence_parallel_rank(), None
    """,
    # the given group ignored: the size asked of the state's group instead
    """
    import torch.distributed as dist

    from veomni.distributed.sequence_parallel.comm import get_unified_sequence_parallel_group


    def sp_size(group=None):
        group = group or get_unified_sequence_parallel_group()
        return dist.get_world_size(get_unified_sequence_parallel_group())
    """,
]

NPU619_BAD.append(
    # the reduction itself runs on the default group, not the one handed in
    """
    import torch.distributed as dist


    def mean_over(t, dp_group=None):
        dist.all_reduce(t)
        return t / dist.get_world_size(dp_group)
    """
)

NPU619_GOOD = """
import torch.distributed as dist

from veomni.distributed.parallel_state import get_parallel_state
from veomni.distributed.sequence_parallel.comm import (
    get_ulysses_sequence_parallel_group,
    get_ulysses_sequence_parallel_world_size,
)


def a(x, group=None):
    if group is None:
        return x.chunk(get_ulysses_sequence_parallel_world_size())
    return x.chunk(dist.get_world_size(group))


def b(x, group=None):
    n = dist.get_world_size(group) if group is not None else get_ulysses_sequence_parallel_world_size()
    return x.chunk(n)


def c(x, group=None):
    group = get_parallel_state().sp_group
    return x.chunk(get_parallel_state().sp_size), group


def d(x):
    return x.chunk(dist.get_world_size()), dist.get_rank()


def g(loss, norm, group):
    dist.all_reduce(loss, group=group)
    dist.all_reduce(norm)
    return loss, norm


def f(t, group=None):
    dist.all_reduce(t, group=group)
    dist.all_reduce(t, dist.ReduceOp.SUM, group)
    return t


def e(x, group=None):
    sp_group = get_ulysses_sequence_parallel_group() if group is None else group
    print(f"rank {dist.get_rank()}")
    return x.chunk(dist.get_world_size(sp_group))
"""


@pytest.mark.parametrize("text", NPU619_BAD)
def test_npu619_variants(text: str) -> None:
    assert _lines("NPU619", text)


def test_npu619_quiet_forms() -> None:
    assert _lines("NPU619", NPU619_GOOD) == []


# ---------------------------------------------------------------- NPU620 rank-identity-mismatch

NPU620_BAD = [
    ('import os\n\nlocal_rank = int(os.environ["RANK"])\n', 3),
    (
        "import torch.distributed as dist\n\n\ndef f(out):\n    return find(out, is_local_rank0=dist.get_rank() == 0)\n",
        5,
    ),
    ("def f(args):\n    return find(args.out, is_rank0=args.local_rank == 0)\n", 2),
    ("import torch\n\n\ndef f(args):\n    torch.npu.set_device(args.global_rank)\n", 5),
    ('def f(args, kind):\n    return f"{kind}_device:{args.global_rank}"\n', 2),
    (
        'import os\n\nFMT = "optim_rank_{}.pt"\n\n\ndef f(d, local_rank):\n    return os.path.join(d, FMT.format(local_rank))\n',
        7,
    ),
    ("import torch.distributed as dist\n\n\ndef f(g):\n    return dist.get_group_rank(g)\n", 5),
]


@pytest.mark.parametrize(("text", "line"), NPU620_BAD)
def test_npu620_variants(text: str, line: int) -> None:
    assert _lines("NPU620", text) == [line]


def test_npu620_quiet_forms() -> None:
    text = """
    import os

    import torch
    import torch.distributed as dist

    FMT = "optim_rank_{}.pt"


    def f(d, args):
        local_rank = dist.get_rank() % torch.npu.device_count()
        torch.npu.set_device(args.local_rank)
        path = os.path.join(d, FMT.format(dist.get_rank()))
        owner = dist.get_global_rank(args.group, 0)
        flag = find(d, is_local_rank0=int(os.getenv("LOCAL_RANK", "0")) == 0)
        return local_rank, path, owner, flag, f"npu:{args.local_rank}"
    """
    assert _lines("NPU620", text) == []


# ---------------------------------------------------------------- NPU621 rank-divergent-collective

NPU621_BAD = [
    # a broadcast only rank 0 reaches (else branch without it)
    """
    import torch.distributed as dist


    def share(obj, rank):
        if rank == 0:
            dist.broadcast_object_list([obj], src=0)
        else:
            obj = None
        return obj
    """,
    # early exit of the non-main ranks, then a barrier
    """
    import torch.distributed as dist


    def finish(is_main_process):
        if not is_main_process:
            return
        write_summary()
        dist.barrier()
    """,
    # a torch.save by the local rank 0, then torch.load by everyone
    """
    import torch


    def cache_stats(stats, path, args):
        if args.local_rank == 0:
            torch.save(stats, path)
        return torch.load(path)
    """,
]


@pytest.mark.parametrize("text", NPU621_BAD)
def test_npu621_variants(text: str) -> None:
    assert _lines("NPU621", text)


def test_npu621_quiet_forms() -> None:
    text = """
    import torch
    import torch.distributed as dist


    def cache_stats(stats, path, args):
        if args.local_rank == 0:
            torch.save(stats, path)
        dist.barrier()
        return torch.load(path)


    def first(is_main):
        if not is_main:
            dist.barrier()
        work()
        if is_main:
            dist.barrier()


    def both(rank, t):
        if rank == 0:
            dist.broadcast(t, src=0)
        else:
            dist.broadcast(t, src=0)
    """
    assert _lines("NPU621", text) == []


# ---------------------------------------------------------------- NPU622 checkpoint-save-lifecycle

NPU622_BAD = [
    # async save with process_group=None, explicitly
    """
    import torch.distributed.checkpoint as dcp


    class Saver:
        fut = None

        def save(self, sd, w):
            if self.fut is not None:
                self.fut.result()
            self.fut = dcp.async_save(sd, storage_writer=w, process_group=None)
    """,
    # the dedicated group made on the default backend
    """
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp


    class Saver:
        fut = None
        pg = None

        def save(self, sd, w):
            if self.pg is None:
                self.pg = dist.new_group(backend="hccl")
            self.wait_for_pending_save()
            self.fut = dcp.async_save(sd, storage_writer=w, process_group=self.pg)
    """,
    # a sync save then rank-0 consolidation with no barrier in between
    """
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp


    def export(sd, w, path):
        dcp.save(sd, storage_writer=w)
        if dist.get_rank() == 0:
            consolidate(path)
        dist.barrier()
    """,
    # a callback: a save with save_async, then a LoRA DCP export, no drain in between
    """
    class Cb:
        def on_end(self, state):
            self.trainer.checkpointer.save(self.path, state, save_async=self.args.save_async)
            empty_cache()
            dist.barrier()
            save_lora_adapter_with_dcp(self.trainer.model, self.path)
    """,
]


@pytest.mark.parametrize("text", NPU622_BAD)
def test_npu622_variants(text: str) -> None:
    assert _lines("NPU622", text, "veomni/checkpoint/toy.py")


def test_npu622_quiet_forms() -> None:
    text = """
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    from veomni.utils.device import empty_cache


    class Saver:
        fut = None
        pg = None

        @classmethod
        def wait_for_pending_save(cls):
            if cls.fut is not None:
                cls.fut.result()

        @classmethod
        def save(cls, sd, w, use_async):
            if use_async:
                if cls.pg is None:
                    cls.pg = dist.new_group(backend="gloo")
                cls.wait_for_pending_save()
                cls.fut = dcp.async_save(sd, storage_writer=w, process_group=cls.pg)
            else:
                dcp.save(sd, storage_writer=w)
                dist.barrier()
                empty_cache()


    class Cb:
        def on_end(self, state):
            empty_cache()
            self.trainer.checkpointer.save(self.path, state, save_async=True)
            empty_cache()
            dist.barrier()
            self.trainer.checkpointer.wait_for_pending_save()
            save_lora_adapter_with_dcp(self.trainer.model, self.path)
    """
    assert _lines("NPU622", text, "veomni/checkpoint/toy.py") == []


# ---------------------------------------------------------------- NPU623 mesh-replicate-dim-dropped


def test_npu623_variants_and_quiet_forms() -> None:
    bad = """
    from torch.distributed.tensor import DTensor, Shard


    def rebuild(t, spec):
        return DTensor.from_local(t, device_mesh=spec.expert_mesh["ep_fsdp"], placements=[Shard(1)])


    def wrap(mods, ps, para):
        shard_mesh = ps.extra_parallel_fsdp_device_mesh[para][para + "_fsdp"]
        return shard_mesh
    """
    assert _lines("NPU623", bad) == [5, 9]
    good = """
    def sizes(ps, para):
        mesh = ps.extra_parallel_fsdp_device_mesh[para]
        group = mesh[f"{para}_fsdp"].get_group()
        return mesh[mesh.mesh_dim_names[:-1]], mesh[f"{para}_fsdp"].size(), group
    """
    assert _lines("NPU623", good) == []
    # the call is given the whole mesh too (it chooses the dims it places on): VeOmni main's LoRA save hands
    # `restore_extra_parallel_dim` the 3-D mesh and its `_fsdp` slice, used only for un-wrapped tensors
    # (reported before the independent review of this session found it a false positive)
    both = """
    def restore(state, spec, restore_dim):
        return restore_dim(state, spec.para_fsdp_mesh, spec.para_fsdp_mesh[f"{spec.para_name}_fsdp"])
    """
    assert _lines("NPU623", both) == []


# ---------------------------------------------------------------- NPU108 / NPU109 (device family)


def test_npu108_variants_and_quiet_forms() -> None:
    bad = """
    import torch

    from veomni.utils.device import get_device_type


    def backend_for(device_type):
        if device_type == "npu":
            backend = "nccl"
        else:
            backend = "nccl"
        return backend


    def load(path, map_location=None):
        return torch.load(path, map_location=map_location or "cuda")


    def pick(device=None):
        return device if device else "cuda:0"
    """
    assert _lines("NPU108", bad, "veomni/utils/toy.py") == [8, 15, 19]
    good = """
    def backend_for(device_type):
        if device_type == "npu":
            return "hccl"
        return "nccl"


    def pick(kind):
        return "cuda" if kind != "hip" else "cuda"
    """
    assert _lines("NPU108", good, "veomni/utils/toy.py") == []


def test_npu109_variants_and_quiet_forms() -> None:
    bad = """
    import torch
    import torch.distributed as dist


    def count_tokens(mask, group):
        n = torch.zeros(1, dtype=torch.long)
        n += mask.sum().cpu()
        dist.all_reduce(n, group=group)
        return n


    def _local_max(grads):
        best = torch.tensor(0.0)
        for g in grads:
            best = torch.maximum(best, g.abs().max())
        return best


    def reduce_max(grads, group):
        m = _local_max(grads)
        dist.all_reduce(m, op=dist.ReduceOp.MAX, group=group)
        return m


    def per_group(names, grads, groups):
        totals = {k: torch.tensor(0.0) for k in names}
        for k in names:
            if grads[k]:
                totals[k] = reduce_max(grads[k], groups[k])
        return totals
    """
    assert _lines("NPU109", bad) == [6, 13, 26]
    good = """
    import torch
    import torch.distributed as dist


    def count_tokens(mask, group):
        n = torch.zeros(1, dtype=torch.long, device=mask.device)
        n += mask.sum()
        dist.all_reduce(n, group=group)
        steps = torch.tensor(3)
        return n, steps
    """
    assert _lines("NPU109", good) == []


def test_second_wave_shapes() -> None:
    gather = """
    import torch
    import torch.distributed as dist


    def gather_lengths(n, group):
        out = [torch.zeros(1, dtype=torch.long) for _ in range(dist.get_world_size(group))]
        dist.all_gather(out, torch.tensor([n], device="npu"), group=group)
        return out
    """
    assert _lines("NPU109", gather) == [6]
    device = """
    import torch
    import torch.distributed as dist


    def dev():
        return torch.device("npu", dist.get_rank())
    """
    assert _lines("NPU620", device) == [6]
    dropped = """
    import torch.distributed.checkpoint as dcp


    def save(sd, w, pg):
        dcp.async_save(sd, storage_writer=w, process_group=pg)
    """
    assert _lines("NPU622", dropped, "veomni/checkpoint/toy.py") == [
        5,
        5,
    ]  # no drain before it; its future dropped


def test_npu621_through_a_helper_of_the_file() -> None:
    text = """
    import torch.distributed as dist


    def _sync_all():
        dist.barrier()


    def export(path, is_rank_0):
        if is_rank_0:
            write(path)
            _sync_all()
    """
    assert _lines("NPU621", text) == [11]


def test_npu622_bare_imports() -> None:
    text = """
    from torch.distributed.checkpoint import async_save, save


    class Keeper:
        pending = None

        def write(self, sd, w, use_async):
            if use_async:
                self.pending = async_save(sd, storage_writer=w)
            else:
                save(sd, storage_writer=w)
    """
    # async: no group, no drain; sync: no barrier
    assert _lines("NPU622", text, "veomni/checkpoint/toy.py") == [9, 9, 11]
