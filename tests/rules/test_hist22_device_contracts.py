"""Device contracts restored by real VeOmni fixes, held in every region of a tree (hist22).

- NPU105: a CUDA-only host gate (``IS_CUDA_AVAILABLE``, ``torch.cuda.is_available()``) around device-neutral code
  (it calls ``get_torch_device()`` / ``get_device_type()``..., itself or through a function or class of the file)
  drops the feature on Ascend (VeOmni 364bb8d8: ``ProfilerWithMem`` gated on CUDA alone).
- NPU105: a reason probe (``None`` = the kernel is usable) that returns ``None`` for every non-CUDA device while
  it vets CUDA devices by compute capability declares a CUDA-only kernel usable on Ascend (VeOmni 2567d4f1).
- NPU112: a torchdata ``StatefulDataLoader`` (or a subclass) that pins memory without ``pin_memory_device`` pins
  on ``torch.cuda.current_device()``, which raises on Ascend (VeOmni 5abd1ef5).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import fix_source, lint_source
from npu_lint.veomni.project import load_project


def _line_of(text: str, *markers: str) -> int:
    """The 1-based line of the first line of the (dedented, stripped) snippet that holds every marker."""
    lines = textwrap.dedent(text).lstrip().splitlines()
    return next(i for i, line in enumerate(lines, 1) if all(m in line for m in markers))


def _lint(path: str, text: str, codes: list[str]) -> list:
    source = SourceFile.from_text(path, textwrap.dedent(text).lstrip())
    return lint_source(source, codes, Settings())


# -- NPU105: CUDA-only host gate around device-neutral code ------------------------------------------------------

GATE_BAD = [
    (  # a checkpoint helper: the synchronising flush is device-neutral, the gate is not
        "veomni/checkpoint/toy_flush.py",
        """
        import torch
        from veomni.utils.device import get_torch_device


        def flush_before_save(sync: bool) -> None:
            if torch.cuda.is_available() and sync:
                get_torch_device().synchronize()
        """,
        7,
        "torch.cuda.is_available()",
    ),
    (  # the trainer reaches the helpers through the module
        "veomni/trainer/toy_memory.py",
        """
        from veomni.utils import device as dev


        def release(step: int, every: int) -> None:
            if step % every == 0 and dev.IS_CUDA_AVAILABLE:
                dev.empty_cache()
        """,
        5,
        "dev.IS_CUDA_AVAILABLE",
    ),
    (  # model code: the move is written for any accelerator
        "veomni/models/transformers/toyvl/modeling_toyvl.py",
        """
        from torch import nn
        from veomni.utils.device import IS_CUDA_AVAILABLE, get_device_type


        class ToyProjector(nn.Module):
            def forward(self, x):
                if IS_CUDA_AVAILABLE:
                    x = x.to(get_device_type(), non_blocking=True)
                return self.proj(x)
        """,
        7,
        "IS_CUDA_AVAILABLE",
    ),
    (  # a distributed helper: the gated call is a function of the file that is device-neutral (its docstring
        # speaks of CUDA: prose is not code)
        "veomni/distributed/toy_snapshot.py",
        """
        from ..utils.device import IS_CUDA_AVAILABLE, get_torch_device


        def _dump(path):
            \"\"\"Dump the CUDA caching allocator's history.\"\"\"
            get_torch_device().memory._dump_snapshot(path)


        def maybe_dump(path, enabled):
            if enabled and IS_CUDA_AVAILABLE:
                _dump(path)
            return path
        """,
        10,
        "IS_CUDA_AVAILABLE",
    ),
]


GATE_BAD += [
    (  # the gate is kept in a flag first
        "veomni/utils/toy_trace.py",
        """
        from .device import IS_CUDA_AVAILABLE, get_torch_device


        def trace_step(step, record):
            keep_history = IS_CUDA_AVAILABLE and record
            if keep_history:
                get_torch_device().memory._record_memory_history(max_entries=step)
        """,
        6,
        "keep_history",
    ),
    (  # the host's device type compared with "cuda"
        "veomni/ops/toy_stream_pool.py",
        """
        from veomni.utils.device import get_device_type, get_torch_device


        def side_stream():
            if get_device_type() == "cuda":
                return get_torch_device().Stream()
            return None
        """,
        5,
        'get_device_type() == "cuda"',
    ),
]


@pytest.mark.parametrize(("path", "text", "line", "probe"), GATE_BAD)
def test_cuda_only_host_gate_around_neutral_code(path: str, text: str, line: int, probe: str) -> None:
    found = _lint(path, text, ["NPU105"])
    assert [d.line for d in found] == [_line_of(text, "if ", probe)]
    assert f"`{probe}` is False on an Ascend host" in found[0].message


def test_gate_fix_drops_the_probe_from_the_and() -> None:
    path, text = GATE_BAD[1][0], textwrap.dedent(GATE_BAD[1][1]).lstrip()
    source = SourceFile.from_text(path, text)
    fixed = fix_source(source, ["NPU105"], Settings(), unsafe=True)
    assert "if step % every == 0:\n" in fixed.text


GATE_QUIET = [
    (  # a setting compared with "cuda" (it may mean "the accelerator"), mapped to the host's device
        "veomni/trainer/toy_init.py",
        """
        import torch
        from veomni.utils.device import get_device_type


        def pick(init_device="cpu"):
            if init_device == "cuda":
                return torch.device(get_device_type())
            return torch.device("cpu")
        """,
    ),
    (  # a flag that admits any accelerator
        "veomni/utils/toy_trace.py",
        """
        from .device import IS_CUDA_AVAILABLE, IS_NPU_AVAILABLE, get_torch_device


        def trace_step(step, record):
            keep_history = (IS_CUDA_AVAILABLE or IS_NPU_AVAILABLE) and record
            if keep_history:
                get_torch_device().memory._record_memory_history(max_entries=step)
        """,
    ),
    (  # the fixed shape: any accelerator
        "veomni/utils/toy_prof.py",
        """
        from .device import IS_CUDA_AVAILABLE, IS_NPU_AVAILABLE, get_torch_device


        def start(profile_memory):
            if (IS_CUDA_AVAILABLE or IS_NPU_AVAILABLE) and profile_memory:
                get_torch_device().memory._record_memory_history()
        """,
    ),
    (  # the body names CUDA itself: CUDA code on purpose
        "veomni/utils/toy_precision.py",
        """
        import torch
        from .device import IS_CUDA_AVAILABLE, get_torch_device


        def strict_matmul():
            if IS_CUDA_AVAILABLE:
                torch.backends.cuda.matmul.allow_tf32 = False
                get_torch_device().synchronize()
        """,
    ),
    (  # the NPU has its own branch
        "veomni/utils/toy_sync.py",
        """
        import torch_npu
        from .device import IS_CUDA_AVAILABLE, IS_NPU_AVAILABLE, get_torch_device


        def sync():
            if IS_CUDA_AVAILABLE:
                get_torch_device().synchronize()
            elif IS_NPU_AVAILABLE:
                torch_npu.npu.synchronize()
        """,
    ),
    (  # an `if` on an NPU host beside it does the same work
        "veomni/data/toy_pin.py",
        """
        from ..utils.device import IS_CUDA_AVAILABLE, IS_NPU_AVAILABLE, get_torch_device


        def warm(stream_pool):
            if IS_CUDA_AVAILABLE:
                stream_pool.append(get_torch_device().Stream())
            if IS_NPU_AVAILABLE:
                stream_pool.append(get_torch_device().Stream(priority=0))
        """,
    ),
    (  # a negated early exit before neutral code: whether the feature is CUDA-only is the author's call
        "veomni/ops/toy_probe.py",
        """
        from veomni.utils.device import IS_CUDA_AVAILABLE, get_device_type


        def backend_usable():
            if not IS_CUDA_AVAILABLE:
                return False
            return probe(get_device_type())
        """,
    ),
    (  # a CUDA-only kernel named in the condition
        "veomni/models/transformers/toy/modeling_toy.py",
        """
        from veomni.utils.device import IS_CUDA_AVAILABLE, get_device_type


        def pick(use_triton):
            if use_triton and IS_CUDA_AVAILABLE:
                return get_device_type()
            return "cpu"
        """,
    ),
    (  # tests are not linted for this
        "tests/utils/test_toy_prof.py",
        """
        from veomni.utils.device import IS_CUDA_AVAILABLE, get_torch_device


        def test_snapshot():
            if IS_CUDA_AVAILABLE:
                get_torch_device().memory._record_memory_history()
        """,
    ),
]


@pytest.mark.parametrize(("path", "text"), GATE_QUIET)
def test_gates_that_stay_quiet(path: str, text: str) -> None:
    assert _lint(path, text, ["NPU105"]) == []


# -- NPU105: a reason probe that lets every non-CUDA device through -----------------------------------------------

PROBE_BAD = [
    (
        "veomni/ops/kernels/fp8/gate.py",
        """
        import torch


        def fp8_unavailable_reason(x):
            if not x.is_cuda:
                return None
            props = torch.cuda.get_device_properties(x.device)
            if props.major < 9:
                return "fp8 GEMM needs sm90"
            return None
        """,
        5,
    ),
    (
        "veomni/models/transformers/toy/modeling_toy.py",
        """
        from veomni.utils.device import get_gpu_compute_capability


        def _why_no_fused(t):
            if t.device.type not in ("cuda",):
                return
            cap = get_gpu_compute_capability(t.device)
            if cap < 80:
                return f"sm{cap} is too old for the fused kernel"
            return None
        """,
        5,
    ),
    (
        "veomni/distributed/toy_overlap.py",
        """
        import torch


        def overlap_blocker(q):
            if str(q.device) != "cuda" or q.numel() == 0:
                return None
            major, minor = torch.cuda.get_device_capability(q.device)
            if major < 9:
                return "compute capability " + str(major) + " is unsupported"
            return None
        """,
        5,
    ),
]


@pytest.mark.parametrize(("path", "text", "line"), PROBE_BAD)
def test_reason_probe_passing_non_cuda_devices(path: str, text: str, line: int) -> None:
    found = _lint(path, text, ["NPU105"])
    assert [d.line for d in found] == [_line_of(text, "    if ")]
    assert "returns no reason (None) for every non-CUDA device" in found[0].message


PROBE_QUIET = [
    """
    import torch


    def fp8_unavailable_reason(x):
        if not x.is_cuda:
            return f"{x.device.type} tensors are unsupported"
        major, _ = torch.cuda.get_device_capability(x.device)
        if major < 9:
            return "fp8 GEMM needs sm90"
        return None
    """,
    """
    import torch


    def needs_workaround(x):
        if not x.is_cuda:
            return False
        major, _ = torch.cuda.get_device_capability(x.device)
        return major < 8
    """,
    """
    def checkpoint_problem(x, path):
        if x.device.type != "cuda":
            return None
        if not path:
            return "no path"
        return None
    """,
]


@pytest.mark.parametrize("text", PROBE_QUIET)
def test_reason_probes_that_stay_quiet(text: str) -> None:
    assert _lint("veomni/optim/toy_probe.py", text, ["NPU105"]) == []


# -- NPU112: a StatefulDataLoader pinning for CUDA ---------------------------------------------------------------

PIN_BAD = [
    (
        "veomni/trainer/toy_eval.py",
        """
        from torchdata.stateful_dataloader import StatefulDataLoader as SDL


        def eval_loader(ds, workers):
            return SDL(ds, batch_size=2, num_workers=workers, pin_memory=workers > 0)
        """,
        5,
    ),
    (
        "veomni/data/diffusion/toy_latents.py",
        """
        import torchdata.stateful_dataloader as sdl


        class LatentLoader(sdl.StatefulDataLoader):
            pass


        class ShuffledLatentLoader(LatentLoader):
            pass


        def build(ds, cfg):
            return ShuffledLatentLoader(ds, batch_size=cfg.bs, pin_memory=cfg.pin_memory, drop_last=True)
        """,
        13,
    ),
    (
        "veomni/models/seed_omni/toy_loader.py",
        """
        from torchdata.stateful_dataloader import StatefulDataLoader


        class OmniLoader(StatefulDataLoader):
            def __init__(self, dataset, pin=True, **kwargs):
                super().__init__(dataset, pin_memory=pin, batch_size=kwargs.get("batch_size", 1))
        """,
        6,
    ),
]


@pytest.mark.parametrize(("path", "text", "line"), PIN_BAD)
def test_stateful_loader_pinning_without_device(path: str, text: str, line: int) -> None:
    found = _lint(path, text, ["NPU112"])
    assert [d.line for d in found] == [_line_of(text, "pin_memory=")]
    assert "pins memory without `pin_memory_device`" in found[0].message


PIN_QUIET = [
    """
    from torchdata.stateful_dataloader import StatefulDataLoader
    from veomni.utils.device import get_device_type


    def build(ds):
        return StatefulDataLoader(ds, pin_memory=True, pin_memory_device=get_device_type())
    """,
    """
    from torchdata.stateful_dataloader import StatefulDataLoader


    def build(ds, kwargs):
        a = StatefulDataLoader(ds, pin_memory=False)
        b = StatefulDataLoader(ds, batch_size=2)
        return a, b, StatefulDataLoader(ds, pin_memory=True, **kwargs)
    """,
    """
    from torch.utils.data import DataLoader


    def build(ds):
        return DataLoader(ds, pin_memory=True)
    """,
    """
    from torchdata.stateful_dataloader import StatefulDataLoader
    from veomni.utils.device import get_device_type


    class DeviceLoader(StatefulDataLoader):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("pin_memory_device", get_device_type())
            super().__init__(*args, **kwargs)


    def build(ds):
        return DeviceLoader(ds, pin_memory=True)
    """,
]


@pytest.mark.parametrize("text", PIN_QUIET)
def test_loaders_that_stay_quiet(text: str) -> None:
    assert _lint("veomni/data/toy_build.py", text, ["NPU112"]) == []


def test_fix_adds_the_hosts_device_type() -> None:
    text = textwrap.dedent(PIN_BAD[0][1]).lstrip()
    source = SourceFile.from_text("veomni/trainer/toy_eval.py", text)
    fixed = fix_source(source, ["NPU112"], Settings())
    assert "pin_memory=workers > 0, pin_memory_device=get_device_type())" in fixed.text
    assert "get_device_type" in fixed.text.split("def ")[0]


def test_loader_class_of_another_module_of_the_tree(tmp_path: Path) -> None:
    (tmp_path / "veomni" / "data").mkdir(parents=True)
    (tmp_path / "veomni" / "trainer").mkdir(parents=True)
    (tmp_path / "veomni" / "__init__.py").write_text("")
    (tmp_path / "veomni" / "data" / "__init__.py").write_text("")
    (tmp_path / "veomni" / "data" / "loaders.py").write_text(
        "from torchdata.stateful_dataloader import StatefulDataLoader\n\n\n"
        "class PackedLoader(StatefulDataLoader):\n    pass\n"
    )
    trainer = tmp_path / "veomni" / "trainer" / "toy.py"
    trainer.write_text(
        "from ..data.loaders import PackedLoader\n\n\n"
        "def build(ds, pin):\n    return PackedLoader(ds, pin_memory=pin)\n"
    )
    project = load_project([str(tmp_path)])
    found = lint_source(
        SourceFile.from_text(str(trainer), trainer.read_text()), ["NPU112"], Settings(), project
    )
    assert [d.line for d in found] == [5]
    # the loader module sets the pin device itself: quiet
    (tmp_path / "veomni" / "data" / "loaders.py").write_text(
        "from torchdata.stateful_dataloader import StatefulDataLoader\n\n\n"
        "class PackedLoader(StatefulDataLoader):\n"
        "    def __init__(self, *a, **kw):\n"
        "        super().__init__(*a, pin_memory_device='npu', **kw)\n"
    )
    project = load_project([str(tmp_path)])
    assert (
        lint_source(SourceFile.from_text(str(trainer), trainer.read_text()), ["NPU112"], Settings(), project)
        == []
    )


# -- NPU109: a state-dict shard gathered where it lives (the host under CPU offload), handed to a collective -----

GATHER_BAD = [
    (  # a generator over a local state dict's values, gathered through `.data`, all-reduced
        "veomni/distributed/toy_ema.py",
        """
        import torch.distributed as dist


        def average_weights(model, group):
            sd = model.state_dict()
            out = []
            for p in sd.values():
                whole = p.data.full_tensor()
                dist.all_reduce(whole, group=group)
                out.append(whole)
            return out
        """,
    ),
    (  # the receive buffer is made like the gathered tensor: the broadcast goes through an alias
        "veomni/models/seed_omni/toy_sync.py",
        """
        import torch
        import torch.distributed as dist


        def sync_towers(tower, src, group):
            for key, shard in tower.state_dict().items():
                full = shard.full_tensor()
                recv = torch.empty_like(full)
                operand = full if dist.get_rank() == src else recv
                dist.broadcast(operand, src=src, group=group)
        """,
    ),
    (  # in a trainer callback
        "veomni/trainer/callbacks/toy_push.py",
        """
        import torch.distributed


        def push_to_rollout(model, group):
            for name, value in model.state_dict().items():
                gathered = value.full_tensor() if hasattr(value, "full_tensor") else value
                torch.distributed.broadcast(gathered, src=0, group=group)
        """,
    ),
]


@pytest.mark.parametrize(("path", "text"), GATHER_BAD)
def test_state_dict_shard_gathered_where_it_lives_reaches_a_collective(path: str, text: str) -> None:
    found = _lint(path, text, ["NPU109"])
    assert [d.line for d in found] == [_line_of(text, "full_tensor()")]
    assert "gathers a `state_dict()` shard where it lives" in found[0].message


GATHER_QUIET = [
    # staged on the device first
    """
    import torch
    import torch.distributed as dist


    def push(model, device, group):
        for name, value in model.state_dict().items():
            gathered = value.to(device, non_blocking=True).full_tensor()
            dist.broadcast(gathered, src=0, group=group)
    """,
    # gathered for a save to disk: no collective
    """
    import torch


    def save(model, path):
        full = {}
        for name, value in model.state_dict().items():
            full[name] = value.full_tensor()
        torch.save(full, path)
    """,
    # a gradient, not a state-dict entry
    """
    import torch.distributed as dist


    def norm(params, group):
        for p in params:
            g = p.grad.full_tensor()
            dist.all_reduce(g, group=group)
    """,
]


@pytest.mark.parametrize("text", GATHER_QUIET)
def test_gathers_that_stay_quiet(text: str) -> None:
    assert _lint("veomni/checkpoint/toy_export.py", text, ["NPU109"]) == []
