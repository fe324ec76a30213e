"""Round-9 RMSNorm eps checks (session r9disp, NPU405): the eps a norm is built with must reach its kernel --
never a literal where the function receives an eps, never a getattr fallback to a fixed number, never dropped
while the class keeps one, never a constructor that ignores its eps parameter. Own names; trees in tmp_path."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni.project import load_project


def _lint(root: Path, rel: str, text: str) -> list:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())
    project = load_project([str(root)])
    return lint_source(
        SourceFile.from_text(str(path), path.read_text()), ["NPU405"], Settings(), project=project
    )


@pytest.mark.parametrize(
    "rel,call,expected",
    [
        ("veomni/ops/kernels/norms/npu.py", 'torch_npu.npu_rms_norm(x, self.weight, epsilon=getattr(self, "eps", 1e-6))[0]', 1),
        ("veomni/models/transformers/toy/npu_patch.py", 'torch_npu.npu_rms_norm(x, self.weight, getattr(self, "variance_epsilon", 1e-5))[0]', 1),
        ("veomni/ops/kernels/norms/npu.py", "torch_npu.npu_rms_norm(x, self.weight, epsilon=self.eps)[0]", 0),
        ("veomni/ops/kernels/norms/npu.py", 'torch_npu.npu_rms_norm(x, self.weight, epsilon=getattr(self, "eps"))[0]', 0),
    ],
)  # fmt: skip
def test_getattr_eps_fallback(tmp_path: Path, rel: str, call: str, expected: int) -> None:
    text = f"import torch_npu\n\n\ndef norm_forward_npu(self, x):\n    return {call}\n"
    diags = _lint(tmp_path, rel, text)
    assert len(diags) == expected, [d.message for d in diags]


@pytest.mark.parametrize(
    "call,expected",
    [
        ("out, inv = torch_npu.npu_rms_norm(q, weight_q, 1e-6)", 1),
        ("out, inv = torch_npu.npu_rms_norm(q, weight_q, epsilon=1e-5)", 1),
        ("out, inv = torch_npu.npu_rms_norm(q, weight_q, norm_eps)", 0),
    ],
)
def test_fixed_eps_where_function_receives_one(tmp_path: Path, call: str, expected: int) -> None:
    text = f"""
    import torch
    import torch_npu


    class QKNormFn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, weight_q, norm_eps):
            {call}
            return out
    """
    diags = _lint(tmp_path, "veomni/distributed/toy_qk_norm.py", text)
    assert len(diags) == expected, [d.message for d in diags]


@pytest.mark.parametrize(
    "init,expected",
    [
        ("self.variance_epsilon = 1e-6", 1),
        ("self.eps = 1e-5", 1),
        ("self.variance_epsilon = eps", 0),
        ("self.eps = eps or 1e-6", 0),
    ],
)
def test_norm_init_ignores_eps_parameter(tmp_path: Path, init: str, expected: int) -> None:
    text = f"""
    import torch
    from torch import nn


    class ToyGatedNorm(nn.Module):
        def __init__(self, hidden_size, eps=1e-6):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(hidden_size))
            {init}
    """
    diags = _lint(tmp_path, "veomni/models/transformers/toy/modeling_toy.py", text)
    assert len(diags) == expected, [d.message for d in diags]


@pytest.mark.parametrize(
    "build,expected",
    [
        ("self.q_norm = torch.nn.RMSNorm(dim)", 1),  # the dtype's machine epsilon
        ("self.q_norm = nn.RMSNorm(dim, elementwise_affine=True)", 1),
        ("self.q_norm = torch.nn.RMSNorm(dim, eps=1e-6)", 1),  # a literal while qk_eps is there
        ("self.q_norm = torch.nn.RMSNorm(dim, eps=qk_eps)", 0),
        ("self.q_norm = torch.nn.RMSNorm(dim, qk_eps)", 0),
    ],
)
def test_norm_built_without_the_scope_eps(tmp_path: Path, build: str, expected: int) -> None:
    text = f"""
    import torch
    from torch import nn


    class ToyAttention(nn.Module):
        def __init__(self, dim, qk_eps=1e-6):
            super().__init__()
            {build}
    """
    diags = _lint(tmp_path, "veomni/models/diffusers/toy/attention.py", text)
    assert len(diags) == expected, [d.message for d in diags]


def test_handle_call_drops_the_class_eps(tmp_path: Path) -> None:
    text = """
    import torch
    from torch import nn
    from veomni.ops import VeomniOp
    from veomni.ops.config import resolve_op_impl


    class ToyRMSNorm(nn.Module):
        def __init__(self, hidden_size, eps=1e-6):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(hidden_size))
            self.variance_epsilon = eps
            self.norm_op = VeomniOp("rms_norm", "standard", resolve_op_impl("rms_norm_implementation"))

        def forward(self, hidden_states):
            return self.norm_op(hidden_states, self.weight)
    """
    diags = _lint(tmp_path, "veomni/models/transformers/toy/modeling_toy.py", text)
    assert len(diags) == 1, [d.message for d in diags]
    assert "variance_epsilon" in diags[0].message
    good = text.replace(
        "self.norm_op(hidden_states, self.weight)",
        "self.norm_op(hidden_states, self.weight, eps=self.variance_epsilon)",
    )
    assert not _lint(tmp_path, "veomni/models/transformers/toy/modeling_toy.py", good)


@pytest.mark.parametrize(
    "init,weight,expected",
    [
        ("torch.zeros(dim)", "self.weight", 1),  # a zero weight applied raw: the output is zero
        ("torch.zeros(dim)", "1.0 + self.weight", 0),
        ("torch.ones(dim)", "self.weight", 0),
    ],
)
def test_kernel_module_norm_zero_weight_applied_raw(
    tmp_path: Path, init: str, weight: str, expected: int
) -> None:
    """NPU402 reads the kernel modules that define norm modules too (an NPU gated norm in ``ops/kernels``)."""
    text = f"""
    import torch
    import torch_npu
    from torch import nn


    class ToyNpuGatedRMSNorm(nn.Module):
        def __init__(self, dim, eps=1e-6):
            super().__init__()
            self.weight = nn.Parameter({init})
            self.variance_epsilon = eps

        def forward(self, hidden_states, gate=None):
            hidden_states = torch_npu.npu_rms_norm(hidden_states, {weight}, self.variance_epsilon)[0]
            return hidden_states * torch.sigmoid(gate)
    """
    path = tmp_path / "veomni/ops/kernels/toy_gated/npu_gated_norm.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())
    project = load_project([str(tmp_path)])
    source = SourceFile.from_text(str(path), path.read_text())
    diags = lint_source(source, ["NPU402"], Settings(), project=project)
    assert len(diags) == expected, [d.message for d in diags]


@pytest.mark.parametrize(
    "body,expected",
    [
        ("return torch_npu.npu_rms_norm(x, self.weight, epsilon=self.eps)[1]", 1),
        ("out = torch_npu.npu_rms_norm(x, self.weight, self.eps)[-1]\n    return out", 1),  # through a local
        ("return fused_layer_norm_cuda.rms_forward_affine(x, (4,), self.weight, self.eps)[1]", 1),
        ("return torch_npu.npu_rms_norm(x, self.weight, epsilon=self.eps)[0]", 0),
        (
            "rstd = torch_npu.npu_rms_norm(x, self.weight, self.eps)[1]\n    self.saved = rstd\n    return x",
            0,
        ),
    ],
)
def test_fused_kernel_statistic_returned(tmp_path: Path, body: str, expected: int) -> None:
    """NPU410: the fused kernel's second element (the reciprocal RMS) returned as the norm's output."""
    text = f"import fused_layer_norm_cuda\nimport torch_npu\n\n\ndef toy_forward_npu(self, x):\n    {body}\n"
    path = tmp_path / "veomni/ops/kernels/toy_norm/npu.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    project = load_project([str(tmp_path)])
    diags = lint_source(SourceFile.from_text(str(path), text), ["NPU410"], Settings(), project=project)
    assert len(diags) == expected, [d.message for d in diags]
