"""Issue 20 (round 22's vendor miss): NPU308 reports a function that switches on the device and loads one side's
vendor code on the way to the switch, unguarded (a CUDA extension loaded lazily before the `torch_npu` branch),
and leaves the guarded, cached and mode-selected loads alone."""

from __future__ import annotations

from tests.rules.snippets import lint_snippet

PATH = "veomni/distributed/sequence_parallel/toy_async.py"

HEAD = """
import importlib

import torch
from veomni.utils.device import IS_CUDA_AVAILABLE, IS_NPU_AVAILABLE

if IS_NPU_AVAILABLE:
    import torch_npu

_ext = None


def qk_norm(q, weight, eps, norm_type="rmsnorm"):
    global _ext
"""


def lint(body: str) -> list:
    return lint_snippet(PATH, HEAD + body, ["NPU308"])


def test_cuda_extension_loaded_before_the_device_switch() -> None:
    diags = lint(
        """
    if _ext is None:
        _ext = importlib.import_module("fused_layer_norm_cuda")
    if IS_CUDA_AVAILABLE:
        return _ext.rms_forward_affine(q, q.shape[-1:], weight, eps)
    return torch_npu.npu_rms_norm(q, weight, eps)[0]
"""
    )
    assert [d.line for d in diags] == [16]
    assert "`fused_layer_norm_cuda` is a CUDA extension" in diags[0].message
    assert "`if IS_CUDA_AVAILABLE:` at line 17" in diags[0].message


def test_cuda_extension_loaded_under_the_cuda_test_is_quiet() -> None:
    assert not lint(
        """
    if IS_CUDA_AVAILABLE:
        if _ext is None:
            _ext = importlib.import_module("fused_layer_norm_cuda")
        return _ext.rms_forward_affine(q, q.shape[-1:], weight, eps)
    return torch_npu.npu_rms_norm(q, weight, eps)[0]
"""
    )


def test_static_gpu_package_import_before_a_nested_switch() -> None:
    diags = lint(
        """
    from apex.normalization.fused_layer_norm import fused_rms_norm_affine

    if norm_type == "rmsnorm":
        if not IS_NPU_AVAILABLE:
            return fused_rms_norm_affine(q, weight, q.shape[-1:], eps)
        return torch_npu.npu_rms_norm(q, weight, eps)[0]
    raise NotImplementedError(norm_type)
"""
    )
    assert [d.line for d in diags] == [15]
    assert "`apex` is GPU-only" in diags[0].message


def test_load_in_a_mode_branch_or_a_try_is_quiet() -> None:
    # a load only the layernorm mode runs (a mode NPU does not take), and one with its own ImportError fallback
    assert not lint(
        """
    if norm_type == "layernorm":
        _ext = importlib.import_module("fused_layer_norm_cuda")
    try:
        from apex.normalization import FusedRMSNorm  # noqa: F401
    except ImportError:
        pass
    if IS_CUDA_AVAILABLE:
        return _ext.rms_forward_affine(q, q.shape[-1:], weight, eps)
    return torch_npu.npu_rms_norm(q, weight, eps)[0]
"""
    )


def test_load_after_the_switch_or_without_an_npu_side_is_quiet() -> None:
    assert not lint(
        """
    if IS_CUDA_AVAILABLE:
        out = None
    _ext = importlib.import_module("fused_layer_norm_cuda")
    return _ext.rms_forward_affine(q, q.shape[-1:], weight, eps)
"""
    )


def test_npu_vendor_loaded_before_the_branch_other_hosts_take() -> None:
    diags = lint(
        """
    import torch_npu as tnpu

    if IS_NPU_AVAILABLE:
        return tnpu.npu_rms_norm(q, weight, eps)[0]
    return q * torch.rsqrt(q.pow(2).mean(-1, keepdim=True) + eps) * weight
"""
    )
    assert [d.line for d in diags] == [15]
    assert "`torch_npu` exists only on Ascend hosts" in diags[0].message
