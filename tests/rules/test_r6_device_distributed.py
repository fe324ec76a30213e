"""Round-6 device and distributed contracts, on own shapes (other names, files and routes than the rules'
examples): the device module named as `torch.cuda`; CUDA tests in NPU adapters; device-less allocations in the
framework's own device code; parallel state read in DataLoader workers; transformers-5 name sets used as lists;
`**kwargs` forwarded to one call of a module only; a helper's tuple used as a tensor; grad-norm reduce groups."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source


def _lint(code: str, path: str, rule: str) -> list[tuple[int, str]]:
    source = SourceFile.from_text(path, textwrap.dedent(code).lstrip())
    return [(d.line, d.code) for d in lint_source(source, [rule], Settings())]


# -- NPU102: torch.cuda as a value ---------------------------------------------------------------------------


def test_torch_cuda_module_kept_on_an_instance_and_passed_is_reported() -> None:
    code = """
    import torch


    class RngTracker:
        def __init__(self):
            self.backend = torch.cuda

        def fork(self, run):
            return run(torch.cuda, self.backend.get_rng_state())
    """
    assert _lint(code, "veomni/utils/rng_tracker.py", "NPU102") == [(6, "NPU102"), (9, "NPU102")]


def test_torch_cuda_module_behind_the_cuda_flag_is_quiet() -> None:
    code = """
    import torch
    from veomni.utils.device import IS_CUDA_AVAILABLE


    def accelerator():
        return torch.cuda if IS_CUDA_AVAILABLE else torch.npu
    """
    assert _lint(code, "veomni/utils/rng_tracker.py", "NPU102") == []


# -- NPU105: CUDA tests in NPU code ------------------------------------------------------------------------


def test_cuda_test_in_an_npu_kernel_directory_is_reported_not_in_a_triton_one() -> None:
    code = """
    def forward(x, weight, eps):
        if x.device.type != "cuda":
            return reference(x, weight, eps)
        return fused(x, weight, eps)
    """
    assert _lint(code, "veomni/ops/kernels/layer_norm/npu/fused.py", "NPU105") == [(2, "NPU105")]
    assert _lint(code, "veomni/ops/kernels/layer_norm/triton.py", "NPU105") == []


def test_cuda_test_in_a_model_helper_calling_torch_npu() -> None:
    code = """
    import torch_npu


    def swiglu(gate_up):
        use_fused = gate_up.is_cuda
        if use_fused:
            return torch_npu.npu_swiglu(gate_up)
        gate, up = gate_up.chunk(2, dim=-1)
        return gate.sigmoid() * gate * up
    """
    assert _lint(code, "veomni/models/transformers/toy/modeling_toy.py", "NPU105") == [(5, "NPU105")]


# -- NPU103: framework device code ---------------------------------------------------------------------------

_PAD = """
import torch


def pad_for_sequence_parallel(hidden: torch.Tensor, multiple: int) -> torch.Tensor:
    missing = -hidden.shape[1] % multiple
    filler = torch.zeros(hidden.shape[0], missing, hidden.shape[2], dtype=hidden.dtype)
    return torch.cat([hidden, filler], dim=1)
"""


def test_public_helper_of_a_utils_module_is_an_entry_point_but_not_in_the_data_pipeline() -> None:
    assert _lint(_PAD, "veomni/utils/seq_pad.py", "NPU103") == [(6, "NPU103")]
    assert _lint(_PAD, "veomni/data/seq_pad.py", "NPU103") == []


def test_host_segment_masks_joined_into_the_returned_tensor() -> None:
    code = """
    import torch
    from torch import nn


    class SegmentPooler(nn.Module):
        def forward(self, tokens: torch.Tensor, bounds: list):
            segments = [tokens[a:b] for a, b in bounds]
            flags = [torch.zeros(seg.shape[0], dtype=torch.bool) for seg in segments]
            marks = torch.cat([f for f in flags])
            return marks
    """
    assert _lint(code, "veomni/models/transformers/toy/modeling_toy.py", "NPU103") == [(8, "NPU103")]


def test_autograd_function_forward_in_a_distributed_module() -> None:
    code = """
    import torch
    import torch.distributed as dist


    class _ReduceScatterRows(torch.autograd.Function):
        @staticmethod
        def forward(ctx, full, group):
            ctx.group = group
            out = torch.empty(full.shape[0] // dist.get_world_size(group), *full.shape[1:], dtype=full.dtype)
            dist.reduce_scatter_tensor(out, full, group=group)
            return out
    """
    assert _lint(code, "veomni/distributed/tensor_parallel/rows.py", "NPU103") == [(9, "NPU103")]


# -- NPU610: parallel state in DataLoader workers ------------------------------------------------------------


def test_dataset_item_access_reading_the_sequence_parallel_rank() -> None:
    code = """
    from torch.utils.data import Dataset

    from veomni.distributed.parallel_state import get_sequence_parallel_rank


    class ShardedVideoDataset(Dataset):
        def __init__(self, clips):
            self.clips = clips

        def __getitem__(self, index):
            clip = self.clips[index]
            return clip[get_sequence_parallel_rank() :: 2]
    """
    assert _lint(code, "veomni/data/video.py", "NPU610") == [(12, "NPU610")]


def test_state_read_at_construction_is_quiet() -> None:
    code = """
    from torch.utils.data import Dataset

    from veomni.distributed.parallel_state import get_sequence_parallel_rank


    class ShardedVideoDataset(Dataset):
        def __init__(self, clips):
            self.clips = clips
            self.sp_rank = get_sequence_parallel_rank()

        def __getitem__(self, index):
            return self.clips[index][self.sp_rank :: 2]
    """
    assert _lint(code, "veomni/data/video.py", "NPU610") == []


# -- NPU611: transformers-5 name sets used as lists ----------------------------------------------------------


def test_keep_in_fp32_modules_appended_and_skip_keys_indexed() -> None:
    code = """
    def prepare(model, head_name):
        model._keep_in_fp32_modules.append(head_name)
        first = model._skip_keys_device_placement[0]
        return first
    """
    assert _lint(code, "veomni/models/auto.py", "NPU611") == [(2, "NPU611"), (3, "NPU611")]


def test_class_declaration_and_conversion_are_quiet() -> None:
    code = """
    class ToyPreTrainedModel:
        _keep_in_fp32_modules = ["router"]


    class ToyMoeModel(ToyPreTrainedModel):
        _keep_in_fp32_modules = ToyPreTrainedModel._keep_in_fp32_modules + ["gate"]


    def prepare(model, head_name):
        return sorted(model._keep_in_fp32_modules) + [head_name]
    """
    assert _lint(code, "veomni/models/auto.py", "NPU611") == []


# -- NPU612: **kwargs forwarded to one call only -------------------------------------------------------------


def test_kwargs_forwarded_to_the_first_call_only() -> None:
    code = """
    from torch import nn


    class TwoStreamAttention(nn.Module):
        def forward(self, video, audio, **extra):
            video = self.attend(video, **extra)
            audio = self.attend(audio)
            return video, audio
    """
    assert _lint(code, "veomni/models/transformers/toy/modeling_toy.py", "NPU612") == [(7, "NPU612")]


# -- NPU613: a helper's tuple used as a tensor ---------------------------------------------------------------


def test_pair_passed_to_a_torch_op() -> None:
    code = """
    import torch


    def split_local(x, rank, world):
        rows = x.shape[0] // world
        return x[rank * rows : (rank + 1) * rows], rows


    def local_logits(x, rank, world):
        return torch.softmax(split_local(x, rank, world), dim=-1)
    """
    assert _lint(code, "veomni/distributed/sequence_parallel/toy.py", "NPU613") == [(10, "NPU613")]


def test_helper_with_one_non_tuple_return_is_quiet() -> None:
    code = """
    def split_local(x, rank, world):
        if world == 1:
            return x
        rows = x.shape[0] // world
        return x[rank * rows : (rank + 1) * rows], rows


    def local_rows(x, rank, world):
        out = split_local(x, rank, world)
        return out.float()
    """
    assert _lint(code, "veomni/distributed/sequence_parallel/toy.py", "NPU613") == []


# -- NPU614: grad-norm reduce groups -------------------------------------------------------------------------


def test_dp_group_in_a_clip_function_without_hsdp_handling() -> None:
    code = """
    import torch.distributed as dist


    def clip_grad_norm_offloaded(params, parallel, max_norm):
        local = sum(p.grad.float().pow(2).sum() for p in params)
        dist.all_reduce(local, group=parallel.dp_group)
        return local.sqrt()
    """
    assert _lint(code, "veomni/distributed/clip.py", "NPU614") == [(6, "NPU614")]


def test_hsdp_aware_clip_function_is_quiet() -> None:
    code = """
    import torch.distributed as dist


    def clip_grad_norm_offloaded(params, parallel, max_norm):
        local = sum(p.grad.float().pow(2).sum() for p in params)
        group = parallel.dp_shard_sp_group if parallel.dp_replicate_enabled else parallel.dp_group
        dist.all_reduce(local, group=group)
        return local.sqrt()
    """
    assert _lint(code, "veomni/distributed/clip.py", "NPU614") == []


def test_host_tensor_handed_to_a_collective_in_a_trainer_method() -> None:
    code = """
    import torch
    import torch.distributed as dist


    class MetricsHook:
        def on_step_end(self, losses):
            stats = torch.zeros(2, dtype=torch.float32)
            stats[0], stats[1] = sum(losses), len(losses)
            dist.all_reduce(stats, op=dist.ReduceOp.SUM)
            return (stats[0] / stats[1]).item()
    """
    assert _lint(code, "veomni/trainer/callbacks/metrics.py", "NPU103") == [(7, "NPU103")]


def test_collective_on_a_gloo_group_is_quiet() -> None:
    code = """
    import torch
    import torch.distributed as dist


    class MetricsHook:
        def __init__(self):
            self.cpu_group = dist.new_group(backend="gloo")

        def on_step_end(self, losses):
            stats = torch.zeros(2, dtype=torch.float32)
            dist.all_reduce(stats, group=self.cpu_group)
            return stats
    """
    assert _lint(code, "veomni/trainer/callbacks/metrics.py", "NPU103") == []


def test_eager_kernel_fallback_under_ops_is_checked() -> None:
    code = """
    import torch


    def forward(logits: torch.Tensor, labels: torch.Tensor):
        flat = labels.reshape(-1)
        losses = torch.empty(flat.shape[0], dtype=torch.float32)
        losses.copy_(torch.nn.functional.cross_entropy(logits.flatten(0, -2).float(), flat, reduction="none"))
        return losses
    """
    assert _lint(code, "veomni/ops/kernels/cross_entropy/eager.py", "NPU103") == [(6, "NPU103")]


def test_collate_function_and_import_time_reads() -> None:
    code = """
    from veomni.distributed.parallel_state import get_parallel_state

    DEFAULT_GROUP = get_parallel_state().sp_group


    def video_collate(batch):
        return {"frames": batch, "sp": get_parallel_state().sp_enabled}


    def main():
        return get_parallel_state().sp_size
    """
    assert _lint(code, "veomni/data/video_collate.py", "NPU610") == [(3, "NPU610"), (7, "NPU610")]
