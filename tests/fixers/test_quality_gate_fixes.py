"""Fixes keep the tree's own ruff gate: no call in a default argument (B008), the statements a fix touched are
formatted under the tree's ruff configuration and nothing else is, creating a file is never a safe fix."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from veomni_stub import make_veomni_stub

from npu_lint.core.config import Settings
from npu_lint.core.diagnostics import Applicability, CreateFile, Fix
from npu_lint.core.source import SourceFile
from npu_lint.engine import fix_source, lint_source
from npu_lint.engine.format import touched_lines
from npu_lint.veomni.project import load_project

RUFF = str(Path(sys.executable).parent / "ruff")
PYPROJECT = textwrap.dedent(
    """\
    [tool.ruff]
    line-length = 119

    [tool.ruff.lint]
    select = ["B", "E", "F", "I", "W"]
    ignore = ["E501"]

    [tool.ruff.lint.isort]
    lines-after-imports = 2
    known-first-party = ["veomni"]
    """
)


def _tree(tmp_path: Path) -> Path:
    make_veomni_stub(tmp_path)
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    (tmp_path / "veomni" / "models").mkdir()
    (tmp_path / "veomni" / "models" / "__init__.py").write_text("")
    return tmp_path


def _npu_lint(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "npu_lint", "check", "--no-cache", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
        timeout=300,
    )


def _ruff_check(cwd: Path, path: str) -> str:
    proc = subprocess.run(
        [RUFF, "check", "--no-cache", "--output-format", "concise", path],
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    return proc.stdout


DEFAULTS = textwrap.dedent(
    '''\
    from typing import Literal


    def load(model, init_device: Literal["cpu", "cuda"] = "cuda", backend="nccl"):
        """Load the model."""
        model.to_empty(device=init_device)
        return backend


    pick = lambda device="cuda": device  # noqa: E731
    '''
)
DEFAULTS_FIXED = textwrap.dedent(
    '''\
    from typing import Literal

    from veomni.utils.device import get_device_type, get_dist_comm_backend


    def load(model, init_device: Literal["cpu", "cuda"] | None = None, backend=None):
        """Load the model."""
        if backend is None:
            backend = get_dist_comm_backend()
        if init_device is None:
            init_device = get_device_type()
        model.to_empty(device=init_device)
        return backend


    pick = lambda device="cuda": device  # noqa: E731
    '''
)


def test_default_argument_taken_in_the_body(tmp_path: Path) -> None:
    """`def f(device="cuda")` never becomes `def f(device=get_device_type())` (B008): the default becomes None
    and the body takes the device; a lambda's default cannot, so its fix is display-only."""
    root = _tree(tmp_path)
    path = root / "veomni" / "models" / "loading.py"
    path.write_text(DEFAULTS)
    res = _npu_lint(root, "--fix", "--unsafe-fixes", "--select", "NPU102", "veomni/models/loading.py")
    assert path.read_text() == DEFAULTS_FIXED, res.stdout + res.stderr
    assert (
        _ruff_check(root, "veomni/models/loading.py").strip() == "All checks passed!"
    )  # no B008, imports sorted, nothing unused
    diags = lint_source(
        SourceFile.from_text(str(path), DEFAULTS), ["NPU102"], Settings(), load_project([str(path)])
    )
    by_line = {d.line: d for d in diags}
    assert (
        by_line[4].fix.applicability is Applicability.UNSAFE and "signature changes" in by_line[4].fix.reason
    )
    lam = by_line[10].fix
    assert lam.applicability is Applicability.DISPLAY and "default argument" in lam.reason


def test_safe_fix_of_default_is_not_applied(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    path = root / "veomni" / "models" / "loading.py"
    outcome = fix_source(
        SourceFile.from_text(str(path), DEFAULTS), ["NPU102"], Settings(), load_project([str(path)])
    )
    assert outcome.text == DEFAULTS


UNRELATED = textwrap.dedent(
    """\
    import torch


    def rotate(model, inv_freq):
        keep   =  [1,2,3]  # the user's own formatting: never touched
        scale = torch.ones(4).cuda() + model.compute_the_first_scaling_term(inv_freq, keep) + model.another_term(inv_freq)
        return scale
    """
)
UNRELATED_FIXED = textwrap.dedent(
    """\
    import torch

    from veomni.utils.device import get_device_type


    def rotate(model, inv_freq):
        keep   =  [1,2,3]  # the user's own formatting: never touched
        scale = (
            torch.ones(4).to(get_device_type())
            + model.compute_the_first_scaling_term(inv_freq, keep)
            + model.another_term(inv_freq)
        )
        return scale
    """
)


def test_only_touched_statements_are_formatted(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    path = root / "veomni" / "models" / "rope.py"
    path.write_text(UNRELATED)
    res = _npu_lint(root, "--fix", "--select", "NPU101", "veomni/models/rope.py")
    assert path.read_text() == UNRELATED_FIXED, res.stdout + res.stderr
    again = _npu_lint(root, "--fix", "--select", "NPU101", "veomni/models/rope.py")
    assert path.read_text() == UNRELATED_FIXED, again.stdout


def test_stdin_fix_formats_the_touched_statement(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "npu_lint", "check", "--no-cache", "--fix", "--select", "NPU101",
         "--stdin-filename", "veomni/models/rope.py", "-"],
        cwd=root, input=UNRELATED, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.stdout == UNRELATED_FIXED, proc.stderr


def test_touched_lines() -> None:
    before = "a = 1\nb = 2\nc = 3\nd = 4\ne = 5\nf = 6\n"
    after = "a = 1\nb = 20\nc = 3\nd = 4\ne = 5\nf = 60\ng = 7\n"
    assert touched_lines(before, after) == [(2, 2), (6, 7)]
    assert touched_lines(before, "a = 1\nc = 3\nd = 4\ne = 5\nf = 6\n") == [(1, 2)]  # a deletion


def test_creating_a_file_is_never_safe() -> None:
    fix = Fix("Create x.py", (), Applicability.SAFE, (CreateFile("x.py", ""),))
    assert fix.applicability is Applicability.UNSAFE and "never a safe fix" in fix.reason
    assert not fix.applies(unsafe=False) and fix.applies(unsafe=True)


def test_default_in_body_despite_nested_nonlocal(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    path = root / "veomni" / "models" / "nested.py"
    text = textwrap.dedent(
        """\
        def load(model, init_device="cuda"):
            count = 0

            def bump():
                nonlocal count
                count += 1

            bump()
            return model.to(init_device), count
        """
    )
    outcome = fix_source(
        SourceFile.from_text(str(path), text), ["NPU102"], Settings(), load_project([str(path)]), unsafe=True
    )
    assert "def load(model, init_device=None):\n    if init_device is None:\n" in outcome.text, outcome.text


def test_mixed_line_endings_are_not_reformatted(tmp_path: Path) -> None:
    """ruff would rewrite some endings of a file that mixes them; each line keeps its own instead (the fuzzer:
    the server's and the CLI's fix of an LF file whose last line ends in CRLF differed)."""
    from npu_lint.engine.format import format_touched

    (tmp_path / "pyproject.toml").write_text("[tool.ruff]\nline-length = 100\n")
    path = str(tmp_path / "m.py")
    before = "x = f(a,b)\ny = 1\r\n"
    after = "x = f(a,b, device=d)\ny = 1\r\n"
    assert format_touched(before, after, path) == after
    lf = "x = f(a,b, device=d)\ny = 1\n"
    assert format_touched(before.replace("\r\n", "\n"), lf, path) == "x = f(a, b, device=d)\ny = 1\n"
