"""Round 17, vendor kernels and RMSNorm kernels: contracts that hold wherever a wrapper hands data to an Ascend
kernel. The weight offset of an RMSNorm kernel in any spelling (NPU409: ``w.add(1)``, ``torch.add(w, 1)``), twin
kernel calls reading one group list carried from forward to backward through ``ctx`` (NPU315), kernels imported
by a patch spec's ``add_import`` (NPU315), the halves handed to a fused SwiGLU (NPU309), the rank of a rotary
table against the tensor it rotates (NPU309) and Ascend's private tensor formats (NPU322). Every variant is
written in another file, region and naming than the dev cases; correct variants stay quiet."""

from __future__ import annotations

import textwrap
from pathlib import Path

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni.project import load_project


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    base = {
        "pyproject.toml": "[project]\nname = 'veomni'\n",
        "veomni/__init__.py": "",
        "veomni/ops/__init__.py": "",
        "veomni/ops/kernels/__init__.py": "",
    }
    for rel, text in {**base, **files}.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    return tmp_path


def _lines(tmp_path: Path, files: dict[str, str], rel: str, code: str) -> list[int]:
    root = _tree(tmp_path, files)
    path = root / rel
    project = load_project([str(path)])
    diags = lint_source(SourceFile.from_text(str(path), path.read_text()), [code], Settings(), project)
    return sorted(d.line for d in diags)


# -- NPU409: the offset written as a method call -------------------------------------------------------------

_REGISTER_OFFSET = """
from ....registry import register_op
from .npu import {name}

register_op("rms_norm", "qwen3_5", "npu", {name}, None)
"""


def _offset_kernel(body: str, name: str = "centered_norm_npu") -> dict[str, str]:
    return {
        "veomni/ops/kernels/norms/rms_norm/__init__.py": _REGISTER_OFFSET.format(name=name),
        "veomni/ops/kernels/norms/rms_norm/npu.py": f"import torch\nimport torch_npu\n\n\n{body}",
    }


def test_offset_added_by_a_method_call_is_an_offset_kernel(tmp_path: Path) -> None:
    for i, expr in enumerate(
        (
            "gamma.float().add(1.0).to(gamma.dtype)",
            "gamma.add(1)",
            "torch.add(gamma, 1.0)",
            "torch.add(1, gamma)",
            "gamma.clone().float().add_(1).type_as(x)",
            "gamma.add(other=1.0)",
        )
    ):
        body = f"def centered_norm_npu(x, gamma, eps):\n    g = {expr}\n    return torch_npu.npu_rms_norm(x, g, eps)[0]\n"
        assert (
            _lines(
                tmp_path / str(i), _offset_kernel(body), "veomni/ops/kernels/norms/rms_norm/npu.py", "NPU409"
            )
            == []
        ), expr


def test_weight_added_to_something_else_is_still_a_standard_kernel(tmp_path: Path) -> None:
    for i, expr in enumerate(
        ("gamma.add(0.5)", "gamma.add(1, alpha=2)", "torch.add(gamma, eps)", "gamma.add(x)")
    ):
        body = f"def centered_norm_npu(x, gamma, eps):\n    g = {expr}\n    return torch_npu.npu_rms_norm(x, g, eps)[0]\n"
        assert _lines(
            tmp_path / str(i), _offset_kernel(body), "veomni/ops/kernels/norms/rms_norm/npu.py", "NPU409"
        ) == [7], expr


def test_method_style_offset_kernel_through_add(tmp_path: Path) -> None:
    body = (
        "def shifted_forward_npu(self, x):\n"
        "    w = self.weight.float().add(1.0).to(self.weight.dtype)\n"
        "    return torch_npu.npu_rms_norm(x, w, epsilon=self.eps)[0]\n"
    )
    files = _offset_kernel(body, "shifted_forward_npu")
    assert _lines(tmp_path, files, "veomni/ops/kernels/norms/rms_norm/npu.py", "NPU409") == []
    plain = body.replace(".add(1.0)", "")
    files = _offset_kernel(plain, "shifted_forward_npu")
    assert _lines(tmp_path / "b", files, "veomni/ops/kernels/norms/rms_norm/npu.py", "NPU409") == [7]
