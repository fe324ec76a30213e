"""Proposals that cannot be applied are visible with their reason in every output that shows fixes.

A VeomniOp-era tree of our own (tests/fixtures/trees/veomni_op_models_kernel) gains a model module whose
OpSlot helper is called from a module-level function: the dispatch migration is display-only there
("no `self` for the handle"). ``--diff`` prints the proposal and its reason on stderr, ``--show-fixes`` and
``--output-format json`` carry the built fix (``applicability: display`` with ``reason``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
TREE = TESTS / "fixtures" / "trees" / "veomni_op_models_kernel"
MODULE = TESTS / "fixtures" / "codemod" / "module_display_no_self.py"
REL = "veomni/models_kernel/transformers/dsp/modeling_dsp.py"


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    shutil.copytree(TREE, tmp_path / "t")
    target = tmp_path / "t" / REL
    target.parent.mkdir(parents=True)
    shutil.copy(MODULE, target)
    return tmp_path / "t"


def _run(tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "npu_lint", "check", "--no-cache", "--select", "NPU2", *args, REL]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tree)


def test_diff_prints_the_display_proposal_with_its_reason(tree: Path) -> None:
    before = (tree / REL).read_text()
    proc = _run(tree, "--diff")
    assert proc.stdout == ""  # nothing applicable: the diff itself is empty
    assert "display-only proposal, not applied" in proc.stderr
    assert "reason: " in proc.stderr and "no `self` for the handle" in proc.stderr
    assert f"+++ b/{REL} (proposed)" in proc.stderr
    assert (tree / REL).read_text() == before


def test_show_fixes_prints_the_reason(tree: Path) -> None:
    proc = _run(tree, "--show-fixes")
    assert "not applied automatically (" in proc.stdout and "no `self` for the handle" in proc.stdout


def test_json_carries_display_and_reason(tree: Path) -> None:
    proc = _run(tree, "--output-format", "json")
    data = json.loads(proc.stdout)
    fixes = [d["fix"] for d in data if d["code"] in ("NPU201", "NPU203")]
    assert fixes and all(f["applicability"] == "display" for f in fixes)
    assert all("no `self` for the handle" in f["reason"] for f in fixes)
