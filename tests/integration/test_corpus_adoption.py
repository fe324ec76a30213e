"""Adoption on the real veomni==0.1.12 wheel: ``--add-noqa`` and a baseline on a copy of ``veomni/models``.

``--add-noqa`` never edits generated files: a finding there that traces to a spec line gets its noqa on that
line (inside a post-import code block too: patchgen copies it into the generated file), and the suppression
reads it there. A second run adds nothing. A baseline written for the tree hides every finding of the tree."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from corpus import veomni_wheel_root


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "npu_lint", "check", "--no-cache", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
        timeout=900,
    )


def _generated(root: Path) -> dict[str, str]:
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("generated/*"))
        if p.is_file()
    }


def test_add_noqa_and_baseline_on_the_wheel(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    shutil.copytree(veomni_wheel_root() / "veomni", root / "veomni")
    pkg = "veomni/models/transformers/qwen3"
    generated = _generated(root)
    before = json.loads(_run(root, "--output-format", "json", "--exit-zero", pkg).stdout)
    res = _run(root, "--add-noqa", pkg)
    assert res.returncode == 0, res.stderr
    assert _generated(root) == generated  # never edited
    after = json.loads(_run(root, "--output-format", "json", "--exit-zero", pkg).stdout)
    # what is left is in generated files: unpatched upstream code (no spec line to carry a noqa: use a
    # baseline) and the post-import blocks, whose noqa comments arrive with the next regeneration
    assert len(after) < len(before)
    assert all("/generated/" in d["filename"] for d in after)
    spec = (root / pkg / "qwen3_gpu_patch_gen_config.py").read_text()
    assert 'OpSlot("rms_norm", "standard")  # noqa: NPU201' in spec  # inside the post-import code block
    again = _run(root, "--add-noqa", pkg)
    assert again.stdout.strip() == "Added 0 noqa directives."

    assert _run(root, "--write-baseline", "baseline.json", "veomni/models").returncode == 0
    res = _run(root, "--baseline", "baseline.json", "veomni/models")
    assert res.returncode == 0, res.stdout[-2000:]
    assert "in the baseline not shown" in res.stdout
