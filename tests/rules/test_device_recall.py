"""Issue 20 device recall beyond the documented examples: a configured device tested against CUDA alone where
the NPU branch only rejects the run (NPU102), and CUDA tests around instance-local handle calls (NPU105)."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source

TRAINER = "veomni/trainer/toy_setup.py"
MODEL = "veomni/models_kernel/transformers/toy/modeling_toy.py"


def lint(code: str, codes: list[str], path: str):
    src = SourceFile.from_text(path, textwrap.dedent(code).lstrip("\n"))
    return lint_source(src, codes, Settings())


GATES = """
from veomni.utils.device import get_device_type


def check_options(options, accelerator_device: str):
    if accelerator_device != "cuda":
        raise NotImplementedError("graph capture")
    if options["device"] == "cuda":
        pass
    else:
        raise ValueError("unsupported")
    if not options.pop("offload_device", "cpu") in ["cuda", "cpu"]:
        raise ValueError("offload target")
    if options.get("init_device") not in ("cuda", "npu", "meta"):
        raise ValueError("fine: NPU is accepted")
    if accelerator_device == "cuda":
        return "fused"
    if get_device_type() != "cuda":
        raise NotImplementedError("the device API itself: an explicit dispatch")
    return "generic"
"""


def test_npu102_configured_device_gates() -> None:
    diags = lint(GATES, ["NPU102"], TRAINER)
    assert [d.line for d in diags] == [5, 7, 11]
    assert '`accelerator_device != "cuda"` accepts the configured device as `"cuda"` but not as `"npu"`' in (
        diags[0].message
    )
    assert "`get_device_type()` or `IS_CUDA_AVAILABLE` (veomni.utils.device)" in diags[0].message


def test_npu102_configured_device_gate_outside_veomni_names_torch_accelerator() -> None:
    code = """
    def setup(device_type):
        if device_type != "cuda":
            raise RuntimeError("needs CUDA")
    """
    (diag,) = lint(code, ["NPU102"], "/elsewhere/train.py")
    assert "torch.accelerator" in diag.message


INSTANCE_GATES = """
import functools

from torch import nn
from veomni.ops import VeomniOp


def toy_moe_loss(logits, op=None):
    return op(logits)


class ToyBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.veomni_norm = VeomniOp("rms_norm", "standard", config.ops_config.rms_norm_implementation)
        self.aux = functools.partial(toy_moe_loss, op=self.veomni_norm)
        self.proj = nn.Linear(4, 4)

    def forward(self, x, logits):
        if x.device.type == "cuda":
            x = self.veomni_norm(x, self.weight)
        on_gpu = logits.is_cuda
        if on_gpu:
            return self.aux(logits)
        if x.is_cuda:
            return self.proj(x)  # not a dispatch handle
        return x
"""


def test_npu105_cuda_test_around_an_instance_handle() -> None:
    diags = lint(INSTANCE_GATES, ["NPU105"], MODEL)
    assert [d.line for d in diags] == [19]
    assert "the dispatch handle `self.veomni_norm`" in diags[0].message


OFF_DEVICE = """
import torch
from torch import nn


class ToyVisionTower(nn.Module):
    def forward(self, hidden_states: torch.Tensor, grid: torch.Tensor, meta=None):
        starts = meta["starts"] if meta is not None else None
        dev = starts.device if starts is not None else hidden_states.device
        ids = torch.arange(grid.shape[0], device=dev)
        starts_on_device = starts.to(device=hidden_states.device) if starts is not None else None
        offsets = meta["offsets"]
        offsets = offsets.to(hidden_states.device)
        fine = torch.zeros(grid.shape[0], device=offsets.device)  # rebound to its moved copy: on the device
        return self.blocks(hidden_states, ids, starts_on_device, fine)
"""


def test_npu103_allocation_on_the_device_of_host_metadata() -> None:
    (diag,) = lint(OFF_DEVICE, ["NPU103"], MODEL)
    assert diag.line == 9
    assert "`starts`, which this function itself copies to `hidden_states.device` (line 10)" in diag.message


HOST_LISTS = """
import torch
from torch import nn


class ToyFrames(nn.Module):
    def forward(self, frames: torch.Tensor, lens: torch.Tensor):
        bounds = torch.tensor(lens.tolist() + [frames.shape[0]])
        same = torch.tensor(lens * 2)  # a copy of device data keeps its device
        return frames[bounds[0]] + lens + bounds + same
"""


def test_npu103_tensor_of_a_built_python_list() -> None:
    (diag,) = lint(HOST_LISTS, ["NPU103"], MODEL)
    assert diag.line == 7


PLACEMENT = """
import torch
from torch import nn


class ToyByteModel(nn.Module):
    def forward(self, input_ids: torch.Tensor, lengths=None):
        embeds = self.encoder(input_ids.to(self.encoder.embed.weight.device))
        device = input_ids.device if input_ids is not None else embeds.device
        ones = torch.ones(input_ids.shape, device=device)
        labels = input_ids.to(embeds.device)  # a synchronous copy of the forward's own input
        return self.head(embeds, ones, torch.zeros(3, device=input_ids.device), labels)
"""


def test_npu103_model_parallel_placement_is_not_host_data() -> None:
    """Review of transformers 5.9.0 (blt): a forward input moved to a submodule's weight device (model-parallel
    placement) is not host metadata, nor is one copied synchronously to another input's device."""
    assert not lint(PLACEMENT, ["NPU103"], MODEL)


def test_npu102_collective_backend_gate() -> None:
    code = """
    import torch.distributed as dist


    def gather_tokens(ids, group):
        if dist.get_backend(group) != "nccl":
            raise RuntimeError("token gather needs NCCL")
        comm_backend = dist.get_backend()
        if comm_backend == "nccl":
            return ids  # an explicit dispatch, with a generic path after it
        if comm_backend not in ("nccl", "hccl"):
            raise RuntimeError("fine: HCCL is accepted")
        return ids
    """
    (diag,) = lint(code, ["NPU102"], "veomni/models/transformers/toy/modeling_toy.py")
    assert diag.line == 5
    assert 'accepts the collective backend `"nccl"` but not `"hccl"`' in diag.message
    assert "`get_dist_comm_backend()` (veomni.utils.device)" in diag.message


def test_a_device_string_assigned_after_a_cuda_early_return_is_cuda_only() -> None:
    """Round 7's control: after `if not IS_CUDA_AVAILABLE: return False`, `_device = "cuda"` only runs on CUDA
    hosts. The check on the assigned value skipped the statement on its way up and missed the early return (a
    call in the same place was already judged CUDA-only); without the guard it is still reported."""
    code = """
    import torch

    from veomni.utils.device import IS_CUDA_AVAILABLE


    def can_use(backend):
        if backend is None:
            return True
        if not IS_CUDA_AVAILABLE:
            return False
        _device = "cuda"
        return torch.empty(1, device=_device)
    """
    assert [d.line for d in lint(code, ["NPU102"], "veomni/models/toy/probe.py")] == []
    unguarded = code.replace("        if not IS_CUDA_AVAILABLE:\n            return False\n", "")
    assert [d.line for d in lint(unguarded, ["NPU102"], "veomni/models/toy/probe.py")] == [9]


# -- round 12 device misses, as classes: a CUDA-only host check, a CUDA probe choosing the NPU module, a CPU copy's
# derivations used as an allocation device


def _codes(path: str, text: str, code: str) -> list[int]:
    src = SourceFile.from_text(path, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, [code], Settings()) if d.code == code)


def test_host_residency_check_written_for_cuda_alone() -> None:
    text = """
        def check_host(offsets, flags):
            if offsets.device.type == "cuda":
                raise ValueError("offsets must stay on the host")
            if flags.is_cuda:
                raise ValueError("flags must stay on the host")
            if not flags.is_cuda:
                raise RuntimeError("this kernel needs CUDA tensors")
            if offsets.device.type != "cuda":
                raise RuntimeError("this kernel needs CUDA tensors")
        """
    assert _codes("veomni/distributed/toy_ranges.py", text, "NPU102") == [2, 4]


def test_cuda_probe_choosing_the_npu_module() -> None:
    text = """
        import torch


        def register_toy(architecture):
            if torch.cuda.is_available():
                from .generated.patched_modeling_toy_gpu import ToyForCausalLM
            else:
                from .generated.patched_modeling_toy_npu import ToyForCausalLM
            return ToyForCausalLM


        def seed(s):
            if torch.cuda.is_available():
                torch.cuda.manual_seed(s)
            else:
                torch.manual_seed(s)
        """
    assert _codes("veomni/models/transformers/toy/__init__.py", text, "NPU102") == [5]


def test_cuda_probe_combined_with_an_npu_test_is_quiet() -> None:
    text = """
        import torch
        from transformers.utils import is_torch_npu_available

        if not torch.cuda.is_available() and {npu}:
            from .rope_npu import apply_rope
        else:
            from .rope_triton import apply_rope
        """
    # the NPU test decides: a CPU-only host is not sent to the NPU module
    assert (
        _codes("veomni/ops/kernels/rope/__init__.py", text.format(npu="is_torch_npu_available()"), "NPU102")
        == []
    )
    # the probe alone still chooses it
    assert _codes("veomni/ops/kernels/rope/__init__.py", text.format(npu="True"), "NPU102") == [4]


def test_allocation_on_a_slice_of_a_host_copy_in_a_closure() -> None:
    text = """
        import torch


        def segment_stats(labels, positions):
            positions_cpu = positions.detach().cpu()

            def one(i, a, b):
                labels_slice = labels[a:b]
                pos_slice = positions_cpu[i, a:b].reshape(-1)[: labels_slice.numel()]
                good = torch.zeros((), dtype=torch.bool, device=labels_slice.device)
                bad = torch.zeros((), dtype=torch.bool, device=pos_slice.device)
                return good, bad

            return one(0, 0, 4)
        """
    assert _codes("veomni/utils/toy_stats.py", text, "NPU103") == [11]


def test_host_copy_from_a_helper_reaches_an_autograd_kernel() -> None:
    text = """
        import torch


        def counts_of(mask):
            counts = mask.sum(0)
            host = counts.cpu()
            return counts.tolist(), host, counts


        def route(tokens, mask, fn):
            splits, host, on_device = counts_of(mask)
            offsets = host.cumsum(0).long()
            moved = torch.cumsum(host, dim=0).to(tokens.device)
            same = torch.cumsum(on_device, dim=0)
            out = fn.apply(tokens, offsets, splits)
            return fn.apply(tokens, moved, same, splits), out
        """
    assert _codes("veomni/distributed/moe/toy_layer.py", text, "NPU110") == [15]


def test_host_copy_moved_back_after_a_nested_block_is_quiet() -> None:
    # rev13a #4: assignments are read in source order, not ast.walk's depth order
    text = """
        import torch


        def preprocess(mask):
            counts = mask.sum(dim=(1, 2))
            host_counts = counts.to(torch.device("cpu"), non_blocking=True)
            return host_counts.tolist(), host_counts


        def dispatch(hidden_states, mask, experts_fn):
            splits, host_counts = preprocess(mask)
            with torch.no_grad():
                offsets = torch.cumsum(host_counts, dim=0)
            offsets = offsets.to(hidden_states.device)
            out = experts_fn.apply(hidden_states, offsets, splits)
            with torch.no_grad():
                offsets = torch.cumsum(host_counts, dim=0)
            return experts_fn.apply(hidden_states, offsets, splits), out
        """
    assert _codes("veomni/distributed/moe/toy_layer.py", text, "NPU110") == [18]


def test_host_split_sizes_for_an_all_to_all_are_quiet() -> None:
    # rev13a #5: all-to-all split sizes belong on the host
    text = """
        def preprocess(mask):
            counts = mask.sum(dim=(1, 2))
            host_counts = counts.cpu()
            return host_counts


        def token_pre_all2all(hidden_states, mask, group, experts_fn):
            host_counts = preprocess(mask)
            input_splits = host_counts.long()
            output_sizes = host_counts.long()
            moved = _AllToAll.apply(group, hidden_states, input_splits, output_sizes)
            offsets = host_counts.cumsum(0)
            return moved, experts_fn.apply(moved, offsets)
        """
    assert _codes("veomni/distributed/moe/toy_layer.py", text, "NPU110") == [13]
