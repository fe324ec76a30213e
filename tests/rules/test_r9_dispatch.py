"""Round-9 dispatch checks (session r9disp): the NPU path refusing or skipping itself, and device-keyed lookups
that admit the CUDA rows on every host. Own names and shapes, each written several ways; trees built in
tmp_path."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni.project import load_project


def _lint(root: Path, rel: str, text: str, code: str) -> list:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())
    project = load_project([str(root)])
    return lint_source(SourceFile.from_text(str(path), path.read_text()), [code], Settings(), project=project)


# -- NPU107: a literal CUDA device beside the host's device in a lookup key or an admitted-devices test -----------

_TABLE = """
from ..utils.device import get_device_type


class KernelTable:
    def __init__(self):
        self._rows = {{}}

    def find(self, op, impl):
        {body}
"""


@pytest.mark.parametrize(
    "body,expected",
    [
        ('host_device = get_device_type()\n        return self._rows.get((op, impl, "cuda"))', 1),
        ('device_kind = get_device_type()\n        row = self._rows.get((op, impl, device_kind))\n'
         '        return row or self._rows.get((op, impl, "gpu"))', 1),  # a fallback to the GPU key
        ('device = get_device_type()\n        return [k for k in self._rows if k[2] in (device, "any", "cuda")]', 1),
        ('device = get_device_type()\n        return [k for k in self._rows if k[2] not in (device, "cuda")]', 1),
        ('device = get_device_type()\n        return self._rows.get((op, impl, device))', 0),
        ('device = get_device_type()\n        return [k for k in self._rows if k[2] in (device, "any")]', 0),
        ('return self._rows.get((op, impl, "cuda"))', 0),  # no host device read: a CUDA-only table
        ('device = get_device_type()\n        if device == "cuda":\n'
         '            return self._rows.get((op, impl, "cuda"))\n        return None', 0),  # a CUDA branch
    ],
)  # fmt: skip
def test_literal_cuda_key_beside_host_device(tmp_path: Path, body: str, expected: int) -> None:
    diags = _lint(tmp_path, "veomni/ops/table.py", _TABLE.format(body=body), "NPU107")
    assert len(diags) == expected, [d.message for d in diags]


@pytest.mark.parametrize(
    "answer,expected",
    [
        ("return IS_CUDA_AVAILABLE", 1),
        ("return torch.cuda.is_available()", 1),
        ("return IS_NPU_AVAILABLE", 0),
        ("return is_torch_npu_available()", 0),
    ],
)
def test_npu_named_class_answers_with_cuda(tmp_path: Path, answer: str, expected: int) -> None:
    text = f"""
    import torch

    from ..utils.device import IS_CUDA_AVAILABLE, IS_NPU_AVAILABLE
    from ..utils.import_utils import is_torch_npu_available


    class AscendNpuGate:
        device = "npu"

        def ok(self) -> bool:
            {answer}
    """
    diags = _lint(tmp_path, "veomni/ops/gates.py", text, "NPU107")
    assert len(diags) == expected, [d.message for d in diags]


@pytest.mark.parametrize(
    "branch,expected",
    [
        ('if scan_kernel == "npu":\n        if is_torch_npu_available():\n            raise RuntimeError("x")', 1),
        ('if "npu" == scan_kernel:\n        if IS_NPU_AVAILABLE:\n            raise ValueError("x")', 1),
        ('if scan_kernel == "npu":\n        if not is_torch_npu_available():\n            raise RuntimeError("x")', 0),
        ('if scan_kernel == "cuda":\n        if is_torch_npu_available():\n            raise RuntimeError("x")', 0),
    ],
)  # fmt: skip
def test_npu_branch_raises_when_npu_available(tmp_path: Path, branch: str, expected: int) -> None:
    text = (
        "from ..utils.device import IS_NPU_AVAILABLE\n"
        "from ..utils.import_utils import is_torch_npu_available\n\n\n"
        f"def bind_scan(scan_kernel):\n    {branch}\n    return scan_kernel\n"
    )
    diags = _lint(tmp_path, "veomni/ops/kernels/scan/__init__.py", text, "NPU107")
    assert len(diags) == expected, [d.message for d in diags]


# -- NPU210: the NPU fallback itself skipped on NPU, or applied to the explicit choices ---------------------------

_CONFIG = """
from dataclasses import dataclass, field, fields

from ..utils.import_utils import is_torch_npu_available

_ASCEND_DEFAULTS = {{"scan_implementation": "npu"}}


@dataclass
class ScanOpsConfig:
    scan_implementation: str = field(default="triton")

    def __post_init__(self):
        self._to_npu_names()

    def _to_npu_names(self):
        {body}
"""


@pytest.mark.parametrize(
    "body,expected",
    [
        ("if is_torch_npu_available():\n            return\n"
         "        for name, value in _ASCEND_DEFAULTS.items():\n            setattr(self, name, value)", 1),
        ("if IS_NPU_AVAILABLE:\n            return\n        self.scan_implementation = 'npu'", 1),
        ("if not is_torch_npu_available():\n            return\n"
         "        base = {f.name: f.default for f in fields(self)}\n"
         "        for name, value in _ASCEND_DEFAULTS.items():\n"
         "            if getattr(self, name) != base[name]:\n                setattr(self, name, value)", 0),
        ("if not is_torch_npu_available():\n            return\n"
         "        defaults = {f.name: f.default for f in fields(self)}\n"
         "        for name, value in _ASCEND_DEFAULTS.items():\n"
         "            if getattr(self, name) != defaults[name]:\n                setattr(self, name, value)", 1),
        ("if not is_torch_npu_available():\n            return\n"
         "        for f in fields(self):\n"
         "            if f.default is not getattr(self, f.name):\n"
         "                self.scan_implementation = _ASCEND_DEFAULTS.get(f.name, 'eager')", 1),
        ("if not is_torch_npu_available():\n            return\n"
         "        defaults = {f.name: f.default for f in fields(self)}\n"
         "        for name, value in _ASCEND_DEFAULTS.items():\n"
         "            if getattr(self, name) == defaults[name]:\n                setattr(self, name, value)", 0),
    ],
)  # fmt: skip
def test_npu_fallback_body(tmp_path: Path, body: str, expected: int) -> None:
    text = _CONFIG.format(body=body)
    if "IS_NPU_AVAILABLE" in body:
        text = text.replace(
            "import is_torch_npu_available", "import is_torch_npu_available, IS_NPU_AVAILABLE"
        )
    diags = _lint(tmp_path, "veomni/arguments/scan_arguments.py", text, "NPU210")
    assert len(diags) == expected, [d.message for d in diags]


# -- NPU222: the NPU name listed with eager; an NPU-decided choice that swaps the names -------------------------


@pytest.mark.parametrize(
    "body,expected",
    [
        ('if impl_name in ("eager", "npu"):\n        return None\n    return _ROWS[impl_name]', 1),
        ('if kernel in ["fused_npu", "eager"]:\n        return None\n    return _ROWS[kernel]', 1),
        ('if impl_name in ("eager",):\n        return None\n    return _ROWS[impl_name]', 0),
        ('if impl_name in ("eager", "triton"):\n        return None\n    return _ROWS[impl_name]', 0),
        ('if impl_name in ("npu", "fused_npu"):\n        return _NPU[impl_name]\n    return None', 0),
    ],
)  # fmt: skip
def test_npu_name_listed_with_eager(tmp_path: Path, body: str, expected: int) -> None:
    name = "kernel" if "kernel" in body else "impl_name"
    text = f"_ROWS = {{}}\n_NPU = {{}}\n\n\ndef pick({name}):\n    {body}\n"
    diags = _lint(tmp_path, "veomni/ops/pick.py", text, "NPU222")
    assert len(diags) == expected, [d.message for d in diags]


@pytest.mark.parametrize(
    "expr,expected",
    [
        ('"scan_cuda" if is_torch_npu_available() else "scan_npu"', 1),
        ('"fused_npu" if not IS_NPU_AVAILABLE else "fused_quack"', 1),
        ('"scan_npu" if is_torch_npu_available() else "scan_cuda"', 0),
        ('"eager" if is_torch_npu_available() else "triton"', 1),  # eager on NPU: the forced-eager form
        ('"fused_quack" if not IS_NPU_AVAILABLE else "fused_npu"', 0),
    ],
)
def test_npu_decided_choice_swapped(tmp_path: Path, expr: str, expected: int) -> None:
    text = (
        "from ..utils.device import IS_NPU_AVAILABLE\n"
        "from ..utils.import_utils import is_torch_npu_available\n\n\n"
        f"def legacy_alias(value):\n    if value == 'fused':\n        value = {expr}\n    return value\n"
    )
    diags = _lint(tmp_path, "veomni/arguments/alias.py", text, "NPU222")
    assert len(diags) == expected, [d.message for d in diags]


@pytest.mark.parametrize(
    "post_init,expected",
    [
        ("if self.scan_implementation == 'fused':\n            self.scan_implementation = 'x'\n"
         "            self._npu_names()\n        self._validate()", 1),
        ("if legacy:\n            self._npu_names()\n        self._check_choices()", 1),
        ("self._npu_names()\n        self._validate()", 0),
        ("if is_torch_npu_available():\n            self._npu_names()\n        self._validate()", 0),
        ("if self.scan_implementation == 'fused':\n            self._npu_names()\n"
         "            self._validate()", 0),  # the validation is as conditional as the fallback
    ],
)  # fmt: skip
def test_npu_fallback_called_conditionally(tmp_path: Path, post_init: str, expected: int) -> None:
    post_init = post_init.replace("\n", "\n    ")  # the template below is indented one level deeper
    text = f"""
    from dataclasses import dataclass, field

    from ..utils.import_utils import is_torch_npu_available

    legacy = False


    @dataclass
    class ScanOpsConfig:
        scan_implementation: str = field(default="triton")

        def __post_init__(self):
            {post_init}

        def _npu_names(self):
            self.scan_implementation = "npu"

        def _validate(self):
            pass

        def _check_choices(self):
            pass
    """
    diags = _lint(tmp_path, "veomni/arguments/scan_arguments.py", text, "NPU210")
    assert len(diags) == expected, [d.message for d in diags]
