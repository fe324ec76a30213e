"""Device neutrality of kernel code by backend (``veomni.backends``), short-circuit CUDA guards, and host
allocations that device data is written into (NPU101/NPU102/NPU103)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni import backends


def _codes(path: str, text: str, codes: list[str]) -> list[str]:
    src = SourceFile.from_text(path, textwrap.dedent(text))
    return [d.code for d in lint_source(src, codes, Settings(), None) if d.code in codes]


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("veomni/ops/kernels/moe/npu_group_gemm.py", backends.NPU),
        ("veomni/ops/kernels/gated_delta_rule/_ascend/triton/utils.py", backends.NPU),
        ("veomni/ops/kernels/rotary/triton_wan.py", backends.CUDA),
        ("veomni/ops/kernels/deepseek_v4/tilelang_indexer.py", backends.CUDA),
        ("veomni/ops/kernels/cross_entropy/eager.py", backends.ANY),
        ("veomni/ops/registry.py", backends.ANY),
    ],
)
def test_path_backend(path: str, expected: str) -> None:
    assert backends.path_backend(path) == expected


def test_name_and_import_backends() -> None:
    assert backends.name_backend("CudaKernelRequirement") == backends.CUDA
    assert backends.name_backend("NpuKernelRequirement") == backends.NPU
    assert backends.name_backend("chunk_loss_function") == backends.ANY
    assert backends.name_backend("load_model_to_gpu") == backends.ANY  # VeOmni's "gpu" means any accelerator
    import ast

    assert backends.import_backend(ast.parse("import triton\nimport torch")) == backends.CUDA
    assert backends.import_backend(ast.parse("import torch_npu")) == backends.NPU
    assert backends.import_backend(ast.parse("import torch_npu\nfrom .liger import x")) == backends.ANY
    assert backends.import_backend(ast.parse("from ...utils.device import get_device_type")) == backends.ANY


def test_directory_backend(tmp_path: Path) -> None:
    cuda_pkg = tmp_path / "tl"
    cuda_pkg.mkdir()
    (cuda_pkg / "kernel.py").write_text("import tilelang\n")
    (cuda_pkg / "helpers.py").write_text("import torch\n")
    mixed = tmp_path / "moe"
    mixed.mkdir()
    (mixed / "fast.py").write_text("import triton\n")
    (mixed / "npu_fast.py").write_text("import torch_npu\n")
    (mixed / "helpers.py").write_text("import torch\n")
    assert backends.directory_backend(str(cuda_pkg)) == backends.CUDA
    assert backends.directory_backend(str(mixed)) == backends.ANY


NPU_ADAPTER = """
import torch
import torch_npu


def combine(hidden_states, indices):
    hidden_states = torch_npu.npu_moe_token_unpermute(hidden_states, indices)
    torch.cuda.current_stream().synchronize()
    return hidden_states
"""


def test_cuda_runtime_in_an_npu_kernel_adapter() -> None:
    assert _codes("veomni/ops/kernels/moe/npu_combine.py", NPU_ADAPTER, ["NPU102"]) == ["NPU102"]


def test_cuda_runtime_in_a_cuda_kernel_file_is_not_reported() -> None:
    text = NPU_ADAPTER.replace("import torch_npu", "import triton").replace(
        "torch_npu.npu_moe_token_unpermute", "triton_unpermute"
    )
    assert _codes("veomni/ops/kernels/moe/triton_combine.py", text, ["NPU102"]) == []


def test_cuda_or_cpu_idiom_in_a_neutral_registry() -> None:
    text = """
    import torch


    def available(rows):
        device = "cuda" if torch.cuda.is_available() else "cpu"
        return [r for r in rows if r.device == device]
    """
    assert "NPU102" in _codes("veomni/ops/registry.py", text, ["NPU102"])


def test_a_class_named_for_cuda_declares_cuda() -> None:
    text = """
    from typing import ClassVar


    class CudaKernelRequirement:
        device: ClassVar[str] = "cuda"
    """
    assert _codes("veomni/ops/requirement.py", text, ["NPU102"]) == []


def test_short_circuit_cuda_presence_guard() -> None:
    text = """
    from veomni.utils.device import IS_CUDA_AVAILABLE


    def unavailable(grad):
        if not IS_CUDA_AVAILABLE or grad.device.type != "cuda":
            return "portable backend"
        return None
    """
    assert _codes("veomni/optim/muon.py", text, ["NPU102"]) == []
    # without the presence test the same comparison treats NPU tensors like CPU tensors
    bare = text.replace("not IS_CUDA_AVAILABLE or ", "")
    assert _codes("veomni/optim/muon.py", bare, ["NPU102"]) == ["NPU102"]


def test_module_level_cuda_flag_guards() -> None:
    text = """
    import torch

    platform = "cuda" if torch.cuda.is_available() else "npu"
    is_nvidia = platform == "cuda"
    is_hopper = is_nvidia and torch.cuda.get_device_capability()[0] >= 9
    """
    found = _codes("veomni/ops/kernels/gdr/_ascend/utils.py", text, ["NPU102"])
    assert found.count("NPU102") <= 1  # the probe itself may be reported; the guarded capability query is not


ACCUMULATOR = """
import torch


class Chunked(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden_states: torch.Tensor, weight: torch.Tensor, loss_fn, chunks: int):
        total = {alloc}
        for part in torch.split(hidden_states, chunks, dim=1):
            (grad_h, grad_w), (loss, _) = torch.func.grad_and_value(loss_fn, argnums=(0, 1), has_aux=True)(part, weight)
            total{update}
        return total
"""


def test_host_scalar_accumulated_in_place_with_device_losses() -> None:
    text = ACCUMULATOR.format(alloc="torch.tensor(0.0)", update=".add_(loss)")
    assert _codes("veomni/ops/kernels/loss/chunked.py", text, ["NPU103"]) == ["NPU103"]


def test_host_scalar_combined_out_of_place_is_quiet() -> None:
    text = ACCUMULATOR.format(alloc="torch.tensor(0.0)", update=" = total + loss")
    assert _codes("veomni/ops/kernels/loss/chunked.py", text, ["NPU103"]) == []
    on_device = ACCUMULATOR.format(
        alloc="torch.tensor(0.0, device=hidden_states.device)", update=".add_(loss)"
    )
    assert _codes("veomni/ops/kernels/loss/chunked.py", on_device, ["NPU103"]) == []


def test_router_mask_scattered_with_device_indices() -> None:
    text = """
    import torch
    from torch import nn


    class Router(nn.Module):
        def route(self, router_logits):
            scores = router_logits.sigmoid()
            group_idx = torch.topk(scores, k=2, dim=-1)[1]
            mask = torch.zeros(scores.shape, dtype=scores.dtype)
            mask.scatter_(1, group_idx, 1)
            return mask

        def forward(self, hidden_states):
            return self.route(hidden_states)
    """
    assert _codes("veomni/models/transformers/toy/modeling_toy.py", text, ["NPU103"]) == ["NPU103"]


def test_monitor_counts_accumulated_from_a_hook() -> None:
    text = """
    import torch


    class Monitor:
        def __init__(self, n):
            self.n = n
            self.counts = dict()

        def record(self, key, indices: torch.Tensor) -> None:
            if key not in self.counts:
                self.counts[key] = torch.zeros(self.n, dtype=torch.long{device})
            self.counts[key] += torch.bincount(indices.reshape(-1), minlength=self.n)


    MONITOR = Monitor(8)


    def router_hook(module, args, output):
        MONITOR.record(module, output[1])
    """
    assert _codes("veomni/utils/monitor.py", text.format(device=""), ["NPU103"]) == ["NPU103"]
    quiet = text.format(device=", device=indices.device")
    assert _codes("veomni/utils/monitor.py", quiet, ["NPU103"]) == []


@pytest.mark.parametrize(
    "condition",
    [
        'IS_NPU_AVAILABLE and cu_seqlens.device.type in ("cuda",)',
        'IS_NPU_AVAILABLE and "cuda" in str(cu_seqlens.device)',
        "IS_NPU_AVAILABLE and cu_seqlens.is_cuda",
    ],
)
def test_cuda_test_conjoined_with_an_npu_guard(condition: str) -> None:
    text = f"""
    from veomni.utils.device import IS_NPU_AVAILABLE


    def host_seqlens(cu_seqlens):
        if {condition}:
            cu_seqlens = cu_seqlens.cpu()
        return cu_seqlens
    """
    assert _codes("veomni/models/transformers/toy/modeling_toy.py", text, ["NPU102", "NPU105"]) == ["NPU105"]


def test_helper_mask_built_on_the_host_and_returned_to_a_forward() -> None:
    text = """
    import torch
    from torch import nn


    def _make_mask(lengths, max_len):
        idx = torch.arange(max_len)
        return idx[None, :] < lengths[:, None]


    class M(nn.Module):
        def forward(self, hidden_states, lengths):
            mask = _make_mask(lengths, hidden_states.shape[1])
            return hidden_states * mask[..., None]
    """
    assert _codes("veomni/models/transformers/toy/modeling_toy.py", text, ["NPU103"]) == ["NPU103"]


def test_allocation_on_the_device_of_a_plain_attribute_table() -> None:
    text = """
    import torch
    from torch import nn


    class Rope(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.freqs = torch.arange(dim).float()

        def forward(self, x):
            pos = torch.arange(x.shape[1], device=self.freqs.device)
            return x * (pos[:, None] * self.freqs[None])
    """
    assert _codes("veomni/models/transformers/toy/modeling_toy.py", text, ["NPU103"]) == ["NPU103"]
    buffer = text.replace(
        "self.freqs = torch.arange(dim).float()", 'self.register_buffer("freqs", torch.arange(dim).float())'
    )
    assert _codes("veomni/models/transformers/toy/modeling_toy.py", buffer, ["NPU103"]) == []


GENERATOR = """
import torch
from torch import nn


class Condition(nn.Module):
    def __init__(self, seed):
        super().__init__()
        self.generator = {creation}
        self.generator.manual_seed(seed)

    def forward(self, latents):
        noise = torch.randn(latents.shape, dtype=latents.dtype, device=self.generator.device, generator=self.generator)
        return latents + noise
"""


def test_cpu_generator_drawn_as_the_compute_device() -> None:
    text = GENERATOR.format(creation="torch.Generator()")
    assert _codes("veomni/models/diffusers/toy/modeling_toy.py", text, ["NPU103"]) == ["NPU103"]
    on_device = GENERATOR.format(creation="torch.Generator(device=torch.device(get_device_type()))")
    assert _codes("veomni/models/diffusers/toy/modeling_toy.py", on_device, ["NPU103"]) == []


def test_a_cuda_keyed_dict_value_called_at_construction_is_not_a_dispatch_table() -> None:
    eager = """
    import torch


    def rng_state():
        return {"cpu": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state_all()}
    """
    assert _codes("veomni/trainer/callbacks/toy.py", eager, ["NPU102"]) == ["NPU102"]
    table = """
    import torch


    EMPTY_CACHE = {"cuda": torch.cuda.empty_cache, "cpu": lambda: None}
    """
    assert _codes("veomni/utils/toy.py", table, ["NPU102"]) == []


HOST_TABLE = """
import torch
from torch import nn


def precompute(dim: int, end: int = 1024, theta: float = 10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].double() / dim))
    freqs = torch.outer(torch.arange(end, device=freqs.device), freqs)
    return torch.polar(torch.ones_like(freqs), freqs)


def precompute_3d(dim: int, end: int = 1024):
    return precompute(dim, end), precompute(dim, end)


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.freqs = precompute_3d(dim)
        self.blocks = nn.ModuleList([nn.Linear(4, 4)])

    def forward(self, x):
        f, h = x.shape[:2]
        freqs = torch.cat([self.freqs[0][:f].view(f, 1, -1), self.freqs[1][:h].view(1, h, -1)], dim=-1){move}
        for block in self.blocks:
            x = block(x, freqs)
        return x
"""


def test_plain_attribute_table_built_on_the_host_meets_device_data() -> None:
    path = "veomni/models/transformers/toy/modeling_toy.py"
    assert _codes(path, HOST_TABLE.format(move=""), ["NPU103"]) == ["NPU103"]
    assert _codes(path, HOST_TABLE.format(move=".to(x.device)"), ["NPU103"]) == []


def test_host_grid_builders_of_a_plain_class_are_not_forward_code() -> None:
    # veomni 0.1.12 minimax_h3/inference.py: position grids built on the host by a helper class's methods
    text = """
    import torch


    class Packer:
        def _video_grid(self, latent_t: int, frame: torch.Tensor) -> torch.Tensor:
            grid = torch.empty(latent_t, frame.shape[0], 3, dtype=torch.float64)
            grid[:, :, 1:] = frame[None]
            return grid.reshape(-1, 3)
    """
    assert _codes("veomni/models/diffusers/toy/inference.py", text, ["NPU103"]) == []


def test_cuda_runtime_in_a_function_named_for_the_gpu_is_reported() -> None:
    text = """
    import torch


    def load_model_to_gpu(model, device=None):
        if device is None:
            device = torch.cuda.current_device()
        model.to(device)
    """
    assert _codes("veomni/distributed/offloading.py", text, ["NPU102"]) == ["NPU102"]
