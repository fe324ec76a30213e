"""NPU1xx / NPU6xx on real code: the veomni==0.1.12 wheel's ``veomni/models``, through the CLI.

The per-rule counts are the ones reviewed finding by finding in bench/accuracy/device.md; a change in them
is a regression (or an improvement to review and record there).
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import corpus

REPO = Path(__file__).resolve().parents[2]
# reviewed in bench/accuracy/device.md (all true positives)
EXPECTED = {"NPU102": 7, "NPU103": 1, "NPU602": 6}


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "npu_lint", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_reviewed_counts_on_veomni_models() -> None:
    root = corpus.veomni_wheel_root()
    proc = _cli(
        "check", "--no-cache", "--output-format", "json", "--select", "NPU1,NPU6", "veomni/models", cwd=root
    )
    assert proc.returncode == 1, proc.stderr
    counts = Counter(d["code"] for d in json.loads(proc.stdout))
    assert dict(counts) == EXPECTED


def _hashes(tree: Path) -> dict[str, str]:
    return {
        str(p.relative_to(tree)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(tree.rglob("*"))
        if p.is_file() and "generated" in p.relative_to(tree).parts
    }


def test_fix_on_a_copy_of_veomni_models(tmp_path: Path) -> None:
    root = corpus.veomni_models_copy(tmp_path)
    models = root / "veomni" / "models"
    before = _hashes(models)
    assert before, "the corpus has generated files"
    args = ("check", "--no-cache", "--fix", "--unsafe-fixes", "--select", "NPU1,NPU6", "veomni/models")
    _cli(*args, cwd=root)
    for path in models.rglob("*.py"):
        ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    assert _hashes(models) == before, "--fix changed a file under generated/"
    snapshot = {p: p.read_bytes() for p in models.rglob("*.py")}
    second = _cli(*args, "--output-format", "json", cwd=root)
    assert {p: p.read_bytes() for p in models.rglob("*.py")} == snapshot, second.stdout
    # what is left: NPU602 (no fix by design)
    assert Counter(d["code"] for d in json.loads(second.stdout)) == {"NPU602": 6}
