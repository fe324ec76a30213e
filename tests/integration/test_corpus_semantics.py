"""Model-semantics rules (NPU40x RMSNorm, NPU41x loss, NPU7xx multimodal) on the real veomni==0.1.12 wheel, and
their recall on the injected bugs of bench/semantics_recall.py.

The counts are the reviewed ones of bench/accuracy/semantics.md; a change here means a change in precision to
review, not a number to update blindly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from corpus import veomni_wheel_root

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.corpus
CODES = "NPU401,NPU402,NPU403,NPU404,NPU405,NPU406,NPU411,NPU412,NPU413,NPU414,NPU415,NPU701,NPU702,NPU703,NPU704,NPU705"


def test_wheel_findings(tmp_path: Path) -> None:
    root = veomni_wheel_root()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "npu_lint",
            "check",
            "--no-cache",
            "--select",
            CODES,
            "--output-format",
            "json",
        ]
        + [str(root / "veomni" / "models")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    # NPU702: no dummy_forward's `self.dtype` can differ from its tower's input layer (every tower registers
    # its patch embedding first and keeps nothing in float32);
    # NPU701: Qwen3.5's Model.forward overwrites its mm_token_type_ids parameter from kwargs (spec + 2 copies)
    assert Counter(d["code"] for d in data) == {"NPU701": 3}
    overwritten = [d for d in data if d["code"] == "NPU701"]
    assert all("mm_token_type_ids" in d["message"] and "/qwen3_5/" in d["filename"] for d in overwritten)


def test_injected_bugs_are_found() -> None:
    veomni_wheel_root()
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import semantics_recall
    finally:
        sys.path.pop(0)
    results = semantics_recall.run()
    missed = [r for r in results if not r["detected"]]
    assert len(results) > 200
    assert not missed, missed
