"""Fix semantics outside the happy path (issue 15 item 17, issue 14): each case is a fix that used to change
behaviour on some host and is now exact, unsafe with its reason, or not offered."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.diagnostics import Applicability
from npu_lint.core.source import SourceFile
from npu_lint.engine import fix_source, lint_source
from npu_lint.rules.base import REGISTRY, load_rule_modules
from npu_lint.veomni.project import Project

load_rule_modules()
CODES = sorted(c for c in REGISTRY if c.startswith("NPU1"))
PATH = "veomni/models/transformers/toy/modeling_toy.py"


def _diags(text: str, project: Project | None = None, path: str = PATH) -> list:
    src = SourceFile.from_text(path, textwrap.dedent(text))
    return lint_source(src, CODES, Settings(), project, fix_mode=True)


def test_guard_of_a_cuda_string_gets_no_fix() -> None:
    diags = _diags(
        """
        import torch


        def pick():
            device_str = "cuda:0" if torch.cuda.is_available() else "cpu"
            return device_str
        """
    )
    guard = next(d for d in diags if "is_available" in d.message)
    assert guard.fix is None  # the new test would select "cuda:0" on NPU
    fixed = fix_source(SourceFile.from_text(PATH, textwrap.dedent(
        """
        import torch


        def pick():
            device_str = "cuda:0" if torch.cuda.is_available() else "cpu"
            return device_str
        """
    )), CODES, Settings(), unsafe=True).text  # fmt: skip
    assert "torch.cuda.is_available()" in fixed  # left alone: on NPU it still picks "cpu", not "cuda:0"


def test_cuda_with_a_device_keeps_it() -> None:
    diags = _diags(
        """
        def place(module, device):
            return module.cuda(device), module.cuda(1)
        """
    )
    by_col = sorted(diags, key=lambda d: d.col)
    assert [e.content for e in by_col[0].fix.edits] == [".to(device)"]
    assert by_col[0].fix.applicability is Applicability.UNSAFE
    assert by_col[1].fix.applicability is Applicability.SAFE
    assert '.to(f"{get_device_type()}:1")' in [e.content for e in by_col[1].fix.edits]


def test_runtime_calls_missing_from_torch_cpu_are_unsafe() -> None:
    diags = _diags(
        """
        import torch


        def seed():
            torch.cuda.manual_seed(0)
            torch.cuda.empty_cache()
            torch.cuda.synchronize()
        """
    )
    safety = {d.source_line.strip(): d.fix.applicability for d in diags}
    assert safety["torch.cuda.manual_seed(0)"] is Applicability.UNSAFE
    assert safety["torch.cuda.empty_cache()"] is Applicability.UNSAFE
    assert safety["torch.cuda.synchronize()"] is Applicability.SAFE
    reason = next(d.fix.reason for d in diags if "manual_seed" in d.source_line)
    assert "torch.cpu" in reason


def test_import_time_calls_are_unsafe() -> None:
    diags = _diags(
        """
        import torch

        X = torch.ones(2).cuda()


        def load(model, init_device="cuda"):
            return model.to(init_device, device="cuda")
        """
    )
    by_line = {(d.line, d.col): d for d in diags}
    module_level = by_line[min(by_line)]
    assert module_level.fix.applicability is Applicability.UNSAFE
    assert "import time" in module_level.fix.reason
    default = next(d for d in diags if d.line == 7)
    assert default.fix.applicability is Applicability.UNSAFE
    body = next(d for d in diags if d.line == 8)
    assert body.fix.applicability is Applicability.SAFE


def test_no_veomni_no_veomni_imports() -> None:
    project = Project(veomni_available=False)
    diags = _diags(
        """
        import torch


        def f(model, hidden_states: torch.Tensor):
            torch.cuda.synchronize()
            return model.cuda(), hidden_states
        """,
        project,
        path="pkg/m.py",  # not inside a veomni package either
    )
    sync = next(d for d in diags if "synchronize" in d.message)
    assert sync.fix is None
    move = next(d for d in diags if ".cuda()" in d.message)
    assert move.fix is not None and "veomni" not in "".join(e.content for e in move.fix.edits)


def test_no_veomni_note_once(tmp_path) -> None:  # noqa: ANN001
    import os
    import subprocess
    import sys

    (tmp_path / "m.py").write_text(
        "import torch\n\n\ndef f(m):\n    torch.cuda.synchronize()\n    return m.cuda()\n"
    )
    res = subprocess.run(
        [sys.executable, "-m", "npu_lint", "--no-cache", "--fix", "m.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
        timeout=120,
    )
    assert res.stderr.count("outside any VeOmni tree") == 1, res.stderr
    fixed = (tmp_path / "m.py").read_text()
    assert "veomni" not in fixed and "torch.accelerator.current_accelerator()" in fixed
