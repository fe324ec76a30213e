"""Round-16 device work: shapes NPU102/NPU103 already recognised but a scope gate or a dataflow gap kept quiet.

- NPU102 in a Triton/TileLang kernel file that launches through the tree's device helpers (``get_torch_device``):
  its ``torch.cuda.*`` runtime calls break it on triton-ascend; its ``.is_cuda`` preconditions stay quiet.
- NPU103: a rebinding in the other arm of an ``if`` does not end the host value; a host value handed to a helper
  that gets no device is followed into the helper's result; a function handed a device that returns an
  allocation ignoring it; a host allocation returned beside a device tensor (off the forward path too).
Each shape has transfer variants in other regions and names, and correct variants that must stay quiet."""

from __future__ import annotations

import textwrap

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source


def _found(path: str, text: str, code: str) -> list[int]:
    src = SourceFile.from_text(path, textwrap.dedent(text))
    return [d.line for d in lint_source(src, [code], Settings(), None) if d.code == code]


# -- NPU102: kernel files written against the device helpers -------------------------------------------------

_KERNEL_HEAD = """
import torch
import triton
import triton.language as tl

from ....utils.device import get_torch_device
"""


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (
            "veomni/ops/kernels/rotary/triton_rope.py",
            """
            def apply_rotary(x, cos, sin):
                with torch.cuda.device(x.device.index):
                    _kernel[(x.shape[0],)](x, cos, sin)
                return x
            """,
        ),
        (
            "veomni/ops/kernels/norm/triton_layernorm.py",
            """
            def layer_norm_fwd(x, weight):
                out = torch.empty_like(x)
                _ln_kernel[(x.shape[0],)](x, weight, out)
                torch.cuda.synchronize()
                return out
            """,
        ),
        (
            "veomni/ops/kernels/moe/tilelang_grouped.py",
            """
            def grouped_mm(a, b):
                stream = torch.cuda.current_stream()
                with get_torch_device().device(a.device):
                    return _launch(a, b, stream)
            """,
        ),
    ],
)
def test_cuda_runtime_call_in_helper_importing_kernel(path: str, body: str) -> None:
    text = _KERNEL_HEAD + textwrap.dedent(body)
    assert _found(path, text, "NPU102")


@pytest.mark.parametrize(
    ("path", "text"),
    [
        (  # the neutral spelling
            "veomni/ops/kernels/rotary/triton_rope.py",
            _KERNEL_HEAD
            + textwrap.dedent(
                """
                def apply_rotary(x, cos, sin):
                    with get_torch_device().device(x.device.index):
                        _kernel[(x.shape[0],)](x, cos, sin)
                    return x
                """
            ),
        ),
        (  # a kernel's own precondition on its tensors is not a runtime call
            "veomni/ops/kernels/moe/triton_hist.py",
            _KERNEL_HEAD
            + textwrap.dedent(
                """
                def histogram(x, bins):
                    assert x.is_cuda and x.dtype == torch.int32
                    with get_torch_device().device(x.device):
                        return _hist[(1,)](x, bins)
                """
            ),
        ),
        (  # a CUDA kernel file that does not import the device helpers stays a CUDA kernel
            "veomni/ops/kernels/rotary/triton_rope.py",
            textwrap.dedent(
                """
                import torch
                import triton

                def apply_rotary(x, cos, sin):
                    with torch.cuda.device(x.device.index):
                        _kernel[(x.shape[0],)](x, cos, sin)
                    return x
                """
            ),
        ),
    ],
)
def test_cuda_kernel_files_quiet(path: str, text: str) -> None:
    assert _found(path, text, "NPU102") == []


# -- NPU103: the other arm of an if does not end a host value ------------------------------------------------


@pytest.mark.parametrize(
    ("path", "text", "line"),
    [
        (
            "veomni/models/seed_omni/decoder/vq/modeling_vq.py",
            """
            import torch
            from torch import nn


            class LookupFreeQuantizer(nn.Module):
                def forward(self, z: torch.Tensor):
                    out = self.proj(z)
                    if z.ndim == 5:
                        aux = torch.zeros(out.shape[0], 1, 1, 1, 1, dtype=out.dtype)
                    else:
                        aux = torch.zeros_like(out[:, :1])
                    return out, aux
            """,
            10,
        ),
        (
            "veomni/models/diffusers/wan/transformer/pos.py",
            """
            import torch
            from torch import nn


            class FramePos(nn.Module):
                def forward(self, latents, causal: bool):
                    if causal:
                        offsets = torch.arange(latents.shape[2])
                    elif latents.ndim == 4:
                        offsets = torch.zeros(latents.shape[2], device=latents.device)
                    else:
                        offsets = latents.new_zeros(latents.shape[2])
                    return latents + offsets[None, None, :, None, None]
            """,
            9,
        ),
        (
            "veomni/models/transformers/toy/modeling_toy.py",
            """
            import torch
            from torch import nn


            class ToyHead(nn.Module):
                def forward(self, hidden_states, use_bias: bool):
                    if use_bias:
                        shift = self.bias
                    else:
                        shift = torch.zeros(hidden_states.shape[-1])
                    return self.out(hidden_states + shift)
            """,
            11,
        ),
    ],
)
def test_rebound_in_other_arm(path: str, text: str, line: int) -> None:
    assert line in _found(path, text, "NPU103")


def test_rebound_on_the_same_path_ends_the_value() -> None:
    text = """
    import torch
    from torch import nn


    class Q(nn.Module):
        def forward(self, z: torch.Tensor):
            out = self.proj(z)
            aux = torch.zeros(3)
            aux = out.mean()
            return out, aux
    """
    assert _found("veomni/models/seed_omni/decoder/vq/modeling_vq.py", text, "NPU103") == []


# -- NPU103: a helper handed the host value and no device ----------------------------------------------------


@pytest.mark.parametrize(
    ("path", "text", "line"),
    [
        (
            "veomni/models/diffusers/ltx/text_encoders/connector.py",
            """
            import torch
            from torch import nn

            from .rope import precompute_freqs_cis


            class Connector(nn.Module):
                def forward(self, hidden_states):
                    grid = torch.arange(hidden_states.shape[1], dtype=torch.float32)
                    grid = grid[None, None, :].expand(hidden_states.shape[0], -1, -1)
                    freqs = precompute_freqs_cis(indices_grid=grid, dim=self.dim, out_dtype=hidden_states.dtype)
                    for block in self.blocks:
                        hidden_states = block(hidden_states, pe=freqs)
                    return hidden_states
            """,
            10,
        ),
        (
            "veomni/models/seed_omni/encoder/audio/modeling_audio.py",
            """
            import torch
            from torch import nn

            from ....utils.pos import sinusoid_table


            class AudioPos(nn.Module):
                def forward(self, features: torch.Tensor) -> torch.Tensor:
                    steps = torch.arange(features.shape[1])
                    table = sinusoid_table(self.channels, steps)
                    return features + table
            """,
            10,
        ),
        (
            "veomni/ops/kernels/attention/eager_bias.py",
            """
            import torch

            from .utils import alibi_slopes


            def attention_bias(scores: torch.Tensor, n_heads: int) -> torch.Tensor:
                heads = torch.arange(n_heads, dtype=torch.float32)
                slopes = alibi_slopes(heads, max_bias=8.0)
                return scores + slopes[None, :, None, None]
            """,
            8,
        ),
    ],
)
def test_host_value_through_helper(path: str, text: str, line: int) -> None:
    assert line in _found(path, text, "NPU103")


@pytest.mark.parametrize(
    "call",
    [
        "precompute(grid, device=hidden_states.device)",  # the helper is given the device
        "precompute(grid, hidden_states)",  # ... or a device tensor
        "precompute(grid, target_device)",  # ... or a name spelt like a device
    ],
)
def test_helper_given_a_device_is_trusted(call: str) -> None:
    text = f"""
    import torch
    from torch import nn

    from .rope import precompute


    class Connector(nn.Module):
        def forward(self, hidden_states, target_device=None):
            grid = torch.arange(hidden_states.shape[1])
            freqs = {call}
            return self.block(hidden_states, pe=freqs)
    """
    assert _found("veomni/models/diffusers/ltx/connector.py", text, "NPU103") == []


def test_torch_op_given_a_device_ends_the_host_path() -> None:
    text = """
    import torch
    from torch import nn


    class DepthHead(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if self.log:
                bins = torch.linspace(torch.log(torch.tensor(self.lo)), torch.log(torch.tensor(self.hi)), 8, device=x.device)
                bins = torch.exp(bins)
            else:
                bins = self.mixlog(x.device)
            return x * bins
    """
    assert _found("veomni/models/transformers/depth/modeling_depth.py", text, "NPU103") == []


# -- NPU103: a device handed in and ignored ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "text", "line"),
    [
        (
            "veomni/models/diffusers/ltx/guidance/perturbations.py",
            """
            import torch
            from dataclasses import dataclass


            @dataclass(frozen=True)
            class BatchedConfig:
                items: list

                def mask(self, kind, block: int, device, dtype) -> torch.Tensor:
                    mask = torch.ones((len(self.items),), dtype=dtype)
                    for i, item in enumerate(self.items):
                        if item.skips(kind, block):
                            mask[i] = 0
                    return mask
            """,
            11,
        ),
        (
            "veomni/data/multimodal/video_utils.py",
            """
            import torch


            def frame_timestamps(num_frames: int, fps: float, target_device: torch.device) -> torch.Tensor:
                ts = torch.arange(num_frames, dtype=torch.float32) / fps
                return ts
            """,
            6,
        ),
        (
            "veomni/distributed/sequence_parallel/pad.py",
            """
            import torch


            class PadPlan:
                def pad_lengths(self, lengths: list, dev: "torch.device"):
                    return torch.tensor(lengths, dtype=torch.long)
            """,
            7,
        ),
    ],
)
def test_device_handed_in_and_ignored(path: str, text: str, line: int) -> None:
    assert line in _found(path, text, "NPU103")


@pytest.mark.parametrize(
    "text",
    [
        """
        import torch


        def pad_lengths(lengths: list, device) -> torch.Tensor:
            return torch.tensor(lengths, dtype=torch.long).to(device)
        """,
        """
        import torch


        def pad_lengths(lengths: list, device="cpu") -> torch.Tensor:
            return torch.tensor(lengths, dtype=torch.long)
        """,
        """
        import torch


        def total(lengths: list, device) -> int:
            counts = torch.tensor(lengths)
            return int(counts.sum().item())
        """,
        """
        import torch
        from torch import nn


        class Rotary(nn.Module):
            def __init__(self, config, device=None):
                super().__init__()
                inv_freq = self.compute_inv_freq(config, device)
                self.register_buffer("inv_freq", inv_freq, persistent=False)

            @staticmethod
            def compute_inv_freq(config, device=None):
                return 1.0 / (config.theta ** (torch.arange(0, config.dim, 2).float() / config.dim))
        """,
    ],
)
def test_device_parameter_quiet(text: str) -> None:
    assert _found("veomni/utils/seqlens.py", text, "NPU103") == []


# -- NPU103: returned beside a device tensor -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "text", "line"),
    [
        (
            "veomni/models/seed_omni/encoder/vision/modeling_vision.py",
            """
            import torch
            from torch import nn


            class VisionEncoder(nn.Module):
                def _get_lm_dummy_data(self):
                    pixel_values = torch.randn((4, 588), dtype=self.dtype, device=self.device)
                    grid_thw = torch.tensor([[1, 2, 2]], dtype=torch.int32)
                    return {"features": pixel_values, "grid_thw": grid_thw}
            """,
            9,
        ),
        (
            "veomni/trainer/dummy_batch.py",
            """
            import torch


            def dummy_audio_batch(device):
                feats = torch.zeros(1, 80, 30, device=device)
                lens = torch.full((1,), 30, dtype=torch.long)
                return feats, lens
            """,
            7,
        ),
        (
            "veomni/models/diffusers/flux/helpers.py",
            """
            import torch


            class LatentPacker:
                def pack(self, latents: torch.Tensor):
                    packed = latents.flatten(2).transpose(1, 2)
                    ids = torch.zeros(packed.shape[1], 3)
                    return packed, ids
            """,
            8,
        ),
    ],
)
def test_returned_beside_device_tensor(path: str, text: str, line: int) -> None:
    assert line in _found(path, text, "NPU103")


@pytest.mark.parametrize(
    "text",
    [
        """
        import torch


        def dummy_batch(device):
            feats = torch.zeros(1, 80, 30, device=device)
            lens = torch.full((1,), 30, dtype=torch.long, device=device)
            return feats, lens
        """,
        """
        import torch


        def split_plan(lengths):
            sizes = torch.tensor(lengths)
            offsets = torch.cumsum(sizes, 0)
            return sizes, offsets
        """,
        """
        import torch


        def dummy_batch(device):
            feats = torch.zeros(1, 80, 30, device=device)
            return feats, torch.tensor(30)
        """,
    ],
)
def test_returned_beside_quiet(text: str) -> None:
    assert _found("veomni/trainer/dummy_batch.py", text, "NPU103") == []
