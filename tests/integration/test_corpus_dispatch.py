"""NPU2xx/NPU4xx on the real veomni==0.1.12 wheel, through the CLI as a user runs it.

The wheel is of the OpSlot generation: per-slot and per-guard findings appear when a handle generation is
targeted (`target-api = "veomni-op"`, as here); under `auto` NPU201 summarises each file once
(tests/integration/test_corpus_truth.py).

The counts are the ones reviewed in bench/accuracy/dispatch.md (every finding classified). NPU201's findings
are also checked one by one against an independent, line-based count (bench/count_opslots.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from corpus import veomni_wheel_root

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.corpus

# others: no findings on the wheel. NPU413: `fused_liger_kernel_cross_entropy` (veomni/ops) takes
# `num_items_in_batch` and never uses it (Liger's mean reduction): a true positive (issue 20).
REVIEWED = {"NPU201": 226, "NPU203": 190, "NPU207": 19, "NPU208": 6, "NPU413": 1}
DECL = re.compile(r"^[ \t]*[A-Za-z_][A-Za-z0-9_]*\s*=\s*(OpSlot)\(")


@pytest.fixture(scope="module")
def findings(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    root = veomni_wheel_root()
    config = tmp_path_factory.mktemp("cfg") / "npu-lint.toml"
    config.write_text('target-api = "veomni-op"\n', encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "npu_lint",
            "check",
            "--no-cache",
            "--config",
            str(config),
            "--output-format",
            "json",
            "--select",
            "NPU2,NPU4",
            str(root / "veomni"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stderr
    notes = proc.stderr.strip().splitlines()
    assert len(notes) == 1 and "does not define VeomniOp" in notes[0], proc.stderr
    return json.loads(proc.stdout)


def test_per_rule_counts(findings: list[dict]) -> None:
    counts = Counter(d["code"] for d in findings)
    assert dict(counts) == REVIEWED


def test_npu201_matches_an_independent_count(findings: list[dict]) -> None:
    models = veomni_wheel_root() / "veomni" / "models"
    expected = set()
    for path in models.rglob("*.py"):
        for row, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            match = DECL.match(line)
            if match:
                expected.add((str(path.resolve()), row, match.start(1) + 1))
    got = {
        (str(Path(d["filename"]).resolve()), d["location"]["row"], d["location"]["column"])
        for d in findings
        if d["code"] == "NPU201"
    }
    assert got == expected
    script = subprocess.run(
        [sys.executable, str(REPO / "bench" / "count_opslots.py"), str(models)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "total module-scope OpSlot declarations: 226" in script.stdout


def test_npu203_findings_are_opslot_guards(findings: list[dict]) -> None:
    kinds = Counter(
        re.search(r"guarded by (.*) with", d["message"]).group(1) for d in findings if d["code"] == "NPU203"
    )
    assert kinds == {
        "`.use_non_eager_impl`": 183,
        "`.bound_kernel() or <eager fallback>`": 5,
        "`.use_eager_impl`": 2,
    }


def test_generated_findings_have_no_applicable_fix(findings: list[dict]) -> None:
    for d in findings:
        if "/generated/" in d["filename"] and d.get("fix"):
            assert d["fix"]["applicability"] == "display"
