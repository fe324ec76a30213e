"""target-api from the user's configuration, through the CLI as a user runs it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

TREES = Path(__file__).resolve().parent.parent / "fixtures" / "trees"


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "npu_lint", "check", "--no-cache", *args, "."],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_forcing_an_api_the_tree_lacks_is_said_once(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(TREES / "op_slot_models", tree)
    (tree / "npu-lint.toml").write_text('target-api = "veomni-kernel"\n')
    forced = run(tree)
    assert forced.returncode in (0, 1), forced.stderr
    notes = [line for line in forced.stderr.splitlines() if line.startswith("npu-lint: note:")]
    assert len(notes) == 1
    assert "VeomniKernel" in notes[0] and "op-slot" in notes[0]
    (tree / "npu-lint.toml").write_text('target-api = "auto"\n')
    # under auto the one note is the OpSlot generation's limitation (dispatch summarised per file)
    auto = [line for line in run(tree).stderr.splitlines() if line.startswith("npu-lint: note:")]
    assert len(auto) == 1 and "OpSlot generation" in auto[0] and "target-api" in auto[0]


def test_veomni_kernel_is_a_valid_target_api(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(TREES / "veomni_kernel_models_kernel", tree)
    (tree / "npu-lint.toml").write_text('target-api = "veomni-kernel"\n')
    result = run(tree)
    assert result.returncode in (0, 1), result.stderr
    assert "note:" not in result.stderr
    (tree / "npu-lint.toml").write_text('target-api = "veomni-opp"\n')
    bad = run(tree)
    assert bad.returncode == 2 and "veomni-kernel" in bad.stderr
