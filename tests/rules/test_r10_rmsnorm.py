"""Round 10, RMSNorm family: a KernelSpec factory's own kernel (a closure over Liger's functional RMSNorm) read
for its variant contract (NPU409), and a fused kernel's output scaled by the weight it already applied (NPU451).
Own names; trees built in tmp_path."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni.project import load_project

_FACTORIES = """
from ..kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec


def _fused_norm_factory():
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    def fused_norm(hidden_states, weight, eps):
        return LigerRMSNormFunction.apply(hidden_states, weight, eps, 0.0, "llama", False, None)

    return fused_norm


def _fused_centered_factory():
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    def fused_centered(hidden_states, weight, eps):
        return LigerRMSNormFunction.apply(hidden_states, weight, eps, {offset}, "gemma", False, None)

    return fused_centered


for _variant, _factory in (("standard", _fused_norm_factory), ("unweighted", _fused_norm_factory)):
    KERNEL_REGISTRY.register(KernelSpec(name="liger_kernel", op_name="rms_norm", variant=_variant,
                                        factory=_factory, hardware=HardwareRequirement(device_type="gpu")))
KERNEL_REGISTRY.register(KernelSpec(name="liger_kernel", op_name="rms_norm", variant="qwen3_5",
                                    factory=_fused_centered_factory, hardware=HardwareRequirement(device_type="gpu")))
"""


@pytest.mark.parametrize(("offset", "found"), [("1.0", 0), ("0.0", 1)])
def test_npu409_factory_closure_offset(tmp_path: Path, offset: str, found: int) -> None:
    path = tmp_path / "veomni/ops/fused/__init__.py"
    path.parent.mkdir(parents=True)
    text = textwrap.dedent(_FACTORIES).lstrip().format(offset=offset)
    path.write_text(text)
    project = load_project([str(tmp_path)])
    got = lint_source(SourceFile.from_text(str(path), text), ["NPU409"], Settings(), project=project)
    assert len(got) == found  # the standard kernel forwarding its weight also serves the unweighted row
    if found:
        assert (
            got[0].line
            == text.splitlines().index(
                '        return LigerRMSNormFunction.apply(hidden_states, weight, eps, 0.0, "gemma", False, None)'
            )
            + 1
        )


def _lint438(text: str, path: str = "veomni/models/transformers/toy/toy_npu_patch_gen_config.py") -> list:
    return lint_source(SourceFile.from_text(path, textwrap.dedent(text).lstrip()), ["NPU451"], Settings())


@pytest.mark.parametrize(
    ("body", "found"),
    [
        ("return self.weight * torch_npu.npu_rms_norm(x, self.weight, epsilon=self.eps)[0].to(x.dtype)", 1),
        (
            "out = torch_npu.npu_rms_norm(x.float(), self.weight.float(), epsilon=self.eps)[0]\n        return out.to(x.dtype) * self.weight",
            1,
        ),
        ("return rms_norm_forward_npu(self, x) * self.weight", 1),
        ("return torch_npu.npu_rms_norm(x, self.weight, epsilon=self.eps)[0]", 0),
        ("return torch_npu.npu_rms_norm(x, None, epsilon=self.eps)[0] * self.weight", 0),
        (
            "out = torch_npu.npu_rms_norm(x, self.weight, epsilon=self.eps)[0]\n        out = out * 2\n        return out * self.weight",
            0,
        ),
    ],
)
def test_npu451_weight_applied_twice(body: str, found: int) -> None:
    text = f"""
    import torch_npu
    from veomni.ops.kernels.rms_norm.npu import rms_norm_forward_npu


    def toy_rmsnorm_forward(self, x):
        {body}
    """
    assert len(_lint438(text)) == found


def _lint405(text: str) -> list:
    source = SourceFile.from_text(
        "veomni/ops/kernels/rms_norm/toy_kernels.py", textwrap.dedent(text).lstrip()
    )
    return lint_source(source, ["NPU405"], Settings())


@pytest.mark.parametrize(
    ("eps_line", "found"),
    [("eps = ctx.eps", 0), ("eps = 1e-5", 1), ("eps = getattr(ctx, 'eps')", 0)],
)
def test_npu405_backward_ignores_the_saved_eps(eps_line: str, found: int) -> None:
    text = f"""
    \"\"\"A toy rms_norm kernel.\"\"\"
    import torch


    class ToyNormFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, eps):
            ctx.save_for_backward(x, weight)
            ctx.eps = eps
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight

        @staticmethod
        def backward(ctx, grad):
            x, weight = ctx.saved_tensors
            {eps_line}
            variance = x.float().pow(2).mean(-1, keepdim=True)
            inv = torch.rsqrt(variance + eps)
            return grad * weight * inv, None, None
    """
    got = _lint405(text)
    assert len(got) == found
    if found:
        assert got[0].line == 15  # the literal's line


@pytest.mark.parametrize(
    ("eps", "found"), [("self.variance_epsilon", 0), ("1e-6", 1), ("getattr(self, 'variance_epsilon')", 0)]
)
def test_npu405_method_style_kernel_fixed_eps(eps: str, found: int) -> None:
    text = f"""
    import torch_npu


    def toy_norm_forward_npu(self, x):
        return torch_npu.npu_rms_norm(x, self.weight, epsilon={eps})[0]
    """
    assert len(_lint405(text)) == found
