"""Round-6 adversarial findings (bench/accuracy/adversary-round6.md): each test failed before its fix."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from npu_lint.core.source import SourceFile
from npu_lint.engine.lint import check_source
from npu_lint.rules.device import _shared

REPO = Path(__file__).resolve().parents[2]


def run(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.run(
        [sys.executable, "-m", "npu_lint", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        input=stdin,
        timeout=300,
    )


def test_many_findings_in_one_function_stay_linear(monkeypatch: pytest.MonkeyPatch) -> None:
    """A6-03: every `.cuda()` under an `if` walked its whole function again to look for a local CUDA flag
    (`_guard_test`): 600 findings in one function took 82 s, 1,200 took 6 min, 3,000 never finished. The
    flags are now collected once per function."""
    count = 400
    text = "import torch\n\n\ndef f(x):\n" + "    if x:\n        x = x.cuda()\n" * count
    walked = 0
    real_walk = ast.walk

    def counting_walk(node: ast.AST):  # type: ignore[no-untyped-def]
        nonlocal walked
        if isinstance(node, ast.FunctionDef):
            walked += 1
        return real_walk(node)

    monkeypatch.setattr(_shared.ast, "walk", counting_walk)
    diags = check_source(SourceFile.from_text("m.py", text), ["NPU101"])
    assert sum(d.code == "NPU101" for d in diags) == count
    assert walked <= 5, walked
