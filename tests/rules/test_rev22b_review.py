"""Precision review rev22b of NPU221 (one registry row held to its variant) and NPU309 (rotary_mode against the
module's cos/sin convention): correct code a maintainer writes that the rules must not report, each quiet case
paired with a still-reported case of the same shape."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.rules.snippets import lint_in_tree, ops_tree

_ROW = """
from ...kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec


def _eager_factory():
    from .eager import forward

    return forward


def _npu_factory():
    from .npu import {kernel}

    return {kernel}


KERNEL_REGISTRY.register(KernelSpec(name="eager", op_name="spin", variant="{other}", factory=_eager_factory,
                                    hardware=HardwareRequirement(device_type="cuda")))
KERNEL_REGISTRY.register(KernelSpec(name="npu", op_name="spin", variant="{variant}", factory=_npu_factory,
                                    hardware=HardwareRequirement(device_type="npu")))
"""

_NPU = """
import torch


def {helper}(x, head_dim):
    return x


def {kernel}(q, k, cos, sin):
    return q, k
"""


@pytest.mark.parametrize(
    ("variant", "other", "kernel", "helper", "expected"),
    [
        # a partial-capable kernel serves the full row; `_pad_to_full` is a helper, no full implementation
        ("full", "partial", "partial_rotary_npu", "_pad_to_full", 0),
        ("full", "partial", "partial_rotary_npu", "full_rotary_npu", 1),
        # `text_position_ids` spells `text` for another reason: no text rotary beside the kernel
        ("text", "vision", "rope_npu_skip_vision_tokens", "text_position_ids", 0),
        ("text", "vision", "vision_rope_npu", "text_rope_npu", 1),
    ],
)
def test_name_of_another_variant_without_a_parallel_own_kernel(
    tmp_path: Path, variant: str, other: str, kernel: str, helper: str, expected: int
) -> None:
    root = ops_tree(
        tmp_path,
        {
            "veomni/ops/kernels/spin/__init__.py": _ROW.format(variant=variant, other=other, kernel=kernel),
            "veomni/ops/kernels/spin/eager.py": "def forward(q, k, cos, sin):\n    return q, k\n",
            "veomni/ops/kernels/spin/npu.py": _NPU.format(kernel=kernel, helper=helper),
        },
    )
    diags = [
        d for d in lint_in_tree(root, "veomni/ops/kernels/spin/__init__.py", ["NPU221"]) if d.code == "NPU221"
    ]
    assert len(diags) == expected, [d.message for d in diags]


_SHARED = """
from ...kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec


def _npu_partial_factory():
    from .npu import partial_rotary_npu

    return partial_rotary_npu


def _npu_full_factory():
    from .npu import {kernel}

    return {kernel}


KERNEL_REGISTRY.register(KernelSpec(name="npu", op_name="spin", variant="partial", factory=_npu_partial_factory,
                                    hardware=HardwareRequirement(device_type="npu")))
KERNEL_REGISTRY.register(KernelSpec(name="npu", op_name="spin", variant="full", factory=_npu_full_factory,
                                    hardware=HardwareRequirement(device_type="npu")))
"""

_PARTIAL_NPU = """
import torch
import torch_npu


def partial_rotary_npu(q, cos, sin):
    d = cos.shape[-1]
    return torch.cat([torch_npu.npu_rotary_mul(q[..., :d], cos, sin), q[..., d:]], -1)


def scale_npu(q, cos, sin):
    return q
"""


def _shared(tmp_path: Path, kernel: str) -> list:
    root = ops_tree(
        tmp_path,
        {
            "veomni/ops/kernels/spin/__init__.py": _SHARED.format(kernel=kernel),
            "veomni/ops/kernels/spin/npu.py": _PARTIAL_NPU,
        },
    )
    return [
        d for d in lint_in_tree(root, "veomni/ops/kernels/spin/__init__.py", ["NPU221"]) if d.code == "NPU221"
    ]


@pytest.mark.xfail(
    strict=True,
    reason="two NPU rows sharing one callable are reported whatever the callable: a partial kernel that slices "
    "by the table's width serves the full row correctly, but whether it does is in its body, not decidable "
    "from the rows (a fixed-fraction partial kernel would be a real bug)",
)
def test_partial_capable_kernel_serving_the_full_row(tmp_path: Path) -> None:
    assert _shared(tmp_path, "partial_rotary_npu") == []


def test_two_rows_sharing_a_kernel_are_still_reported(tmp_path: Path) -> None:
    assert len(_shared(tmp_path, "partial_rotary_npu")) == 1


_2D = """
import torch
import torch_npu


def rope_2d_npu(q, freqs_h, freqs_w):
    cos_h = freqs_h.cos().repeat_interleave(2, dim=-1)
    cos_w = freqs_w.cos().repeat_interleave(2, dim=-1)
    sin_h = freqs_h.sin().repeat_interleave(2, dim=-1)
    sin_w = freqs_w.sin().repeat_interleave(2, dim=-1)
    cos = torch.cat([{cos}], dim=-1)
    sin = torch.cat([sin_h, sin_w], dim=-1)
    return torch_npu.npu_rotary_mul(q, cos, sin, rotary_mode="interleave")
"""


@pytest.mark.parametrize(
    ("cos", "expected"),
    [
        ("cos_h, cos_w", 0),  # the h and w tables, each interleaved, joined along the head
        ("freqs_h.cos(), freqs_h.cos()", 1),  # the same table twice: halves
    ],
)
def test_joined_interleaved_tables(tmp_path: Path, cos: str, expected: int) -> None:
    root = ops_tree(tmp_path, {"veomni/ops/kernels/rope2d/npu.py": _2D.format(cos=cos)})
    diags = [
        d
        for d in lint_in_tree(root, "veomni/ops/kernels/rope2d/npu.py", ["NPU309"])
        if "rotary_mode" in d.message
    ]
    assert len(diags) == expected, [d.message for d in diags]


_TABLES = """
import torch


def rope_tables(freqs):
    return freqs.cos().repeat_interleave(2, dim=-1), freqs.sin().repeat_interleave(2, dim=-1)
"""

_MIXED = """
import torch
import torch_npu

from .tables import rope_tables


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_text_rotary(q, cos, sin):
    return q * cos + rotate_half(q) * sin


def apply_vision_rotary_npu(q, freqs):
    cos, sin = rope_tables(freqs)
    return torch_npu.npu_rotary_mul(q, cos, sin, rotary_mode="{mode}")
"""


@pytest.mark.parametrize(("mode", "expected"), [("interleave", 0), ("half", 1)])
def test_tables_from_an_imported_helper(tmp_path: Path, mode: str, expected: int) -> None:
    """The text rotary of the module is rotate-half; the vision tables come from an imported interleaved helper:
    that helper's module is the reference."""
    root = ops_tree(
        tmp_path,
        {
            "veomni/ops/kernels/vl/tables.py": _TABLES,
            "veomni/ops/kernels/vl/npu.py": _MIXED.format(mode=mode),
        },
    )
    diags = [
        d
        for d in lint_in_tree(root, "veomni/ops/kernels/vl/npu.py", ["NPU309"])
        if "rotary_mode" in d.message
    ]
    assert len(diags) == expected, [d.message for d in diags]


_PARTIAL_ROW = """
from ...kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec


def _npu_full_factory():
    from .npu import apply_rotary_pos_emb_npu

    return apply_rotary_pos_emb_npu


def _npu_partial_factory():
    from .npu import apply_rotary_npu

    return apply_rotary_npu


KERNEL_REGISTRY.register(KernelSpec(name="npu", op_name="rotary_pos_emb", variant="full",
                                    factory=_npu_full_factory, hardware=HardwareRequirement(device_type="npu")))
KERNEL_REGISTRY.register(KernelSpec(name="npu", op_name="rotary_pos_emb", variant="partial",
                                    factory=_npu_partial_factory, hardware=HardwareRequirement(device_type="npu")))
"""

_GENERIC_NPU = """
def apply_rotary_npu(q, k, cos, sin):
    return q, k


def apply_rotary_pos_emb_npu(q, k, cos, sin):
    return q, k


def {extra}(q, k, cos, sin):
    return q, k
"""


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        # `apply_rotary_pos_emb_npu` spells the op only: it is the full row's kernel, not the partial one's
        ("rope_cache_npu", 0),
        (
            "partial_apply_rotary_npu",
            1,
        ),  # a sibling named for the partial variant: the row binds the generic one
    ],
)
def test_sibling_named_for_the_op_only(tmp_path: Path, extra: str, expected: int) -> None:
    root = ops_tree(
        tmp_path,
        {
            "veomni/ops/kernels/rope/__init__.py": _PARTIAL_ROW,
            "veomni/ops/kernels/rope/npu.py": _GENERIC_NPU.format(extra=extra),
        },
    )
    diags = [
        d for d in lint_in_tree(root, "veomni/ops/kernels/rope/__init__.py", ["NPU221"]) if d.code == "NPU221"
    ]
    assert len(diags) == expected, [d.message for d in diags]


_NAMED = """
import torch
import torch_npu


def {helper}(freqs):
    return freqs.half()


{tables}

def apply_rope_npu(x, cos, sin):
    return torch_npu.npu_rotary_mul(x, cos, sin, rotary_mode="{mode}")
"""

_STACKED = """
def rope_tables(freqs):
    emb = torch.stack((freqs, freqs), dim=-1).flatten(-2)
    return emb.cos(), emb.sin()
"""


@pytest.mark.parametrize(
    ("helper", "tables", "mode", "expected"),
    [
        # `half` is the fp16 dtype in `rope_freqs_to_half`, not the rotate-half layout
        ("rope_freqs_to_half", "", "interleave", 0),
        ("apply_half_rotary_emb", "", "interleave", 1),  # a rotary function named for halves
        # each frequency stacked beside itself and flattened: interleaved tables
        ("rope_freqs_to_half", _STACKED, "interleave", 0),
        ("rope_freqs_to_half", _STACKED, "half", 1),
    ],
)
def test_half_as_a_dtype_and_stacked_tables(
    tmp_path: Path, helper: str, tables: str, mode: str, expected: int
) -> None:
    text = _NAMED.format(helper=helper, tables=tables, mode=mode)
    root = ops_tree(tmp_path, {"veomni/ops/kernels/rope16/npu.py": text})
    diags = [
        d
        for d in lint_in_tree(root, "veomni/ops/kernels/rope16/npu.py", ["NPU309"])
        if "rotary_mode" in d.message
    ]
    assert len(diags) == expected, [d.message for d in diags]
