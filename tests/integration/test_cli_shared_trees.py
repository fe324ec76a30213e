"""The command line as a user runs it on the real VeOmni trees of ``../shared/corpora``: properties that hold
whatever the rules report.

``npu-lint check --output-format json`` on VeOmni ``main`` (OpSlot generation, ``veomni/models``) and on the
VeomniOp-era tree (``veomni/models_kernel``), each run twice per session (module-scoped): the exit code says
"findings" or "clean", never "error"; no file fails to parse (NPU001); every finding is located in a file that
exists, at a line it has; every finding in a ``generated/`` file traces back to the patch spec it came from; two
runs print the same report. ``npu-lint audit`` on one model of each tree writes a markdown report.

The trees are read-only here (CI has them so): the linter writes nothing without ``--fix`` and runs with
``--no-cache`` from a temporary directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.corpus import VEOMNI_MAIN, VEOMNI_OP, shared_tree

pytestmark = pytest.mark.corpus

TREES = {VEOMNI_MAIN: "veomni/models", VEOMNI_OP: "veomni/models_kernel"}
AUDITED = {
    VEOMNI_MAIN: "veomni/models/transformers/qwen3",
    VEOMNI_OP: "veomni/models_kernel/transformers/qwen3",
}


def _npu_lint(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``npu-lint ...``: the console script installed next to this interpreter (what ``make test`` installs)."""
    exe = Path(sys.executable).parent / "npu-lint"
    cmd = [str(exe)] if exe.is_file() else [sys.executable, "-m", "npu_lint"]
    return subprocess.run(
        [*cmd, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_COLOR": "1"},
    )


@pytest.fixture(scope="module", params=sorted(TREES))
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """The tree, and two ``check`` runs of its model directory (process result, parsed JSON)."""
    root = shared_tree(request.param)
    target = root / TREES[request.param]
    cwd = tmp_path_factory.mktemp("cli")
    out = []
    for _ in range(2):
        proc = _npu_lint("check", "--no-cache", "--output-format", "json", str(target), cwd=cwd)
        assert proc.returncode in (0, 1), (proc.returncode, proc.stderr[-4000:])
        out.append((proc, json.loads(proc.stdout)))
    return root, out


def test_exit_code_is_findings_or_clean_never_an_error(runs) -> None:  # noqa: ANN001
    _, out = runs
    for proc, report in out:
        assert proc.returncode == (1 if report else 0), (proc.returncode, len(report))
        assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr[-4000:]


def test_every_file_parses(runs) -> None:  # noqa: ANN001
    _, [(_, report), _] = runs
    assert [f["filename"] for f in report if f["code"] == "NPU001"] == []


def test_every_finding_is_located_in_a_file_that_exists(runs) -> None:  # noqa: ANN001
    root, [(_, report), _] = runs
    lines: dict[str, int] = {}
    for f in report:
        path = Path(f["filename"])
        assert path.is_file(), f
        assert path.resolve().is_relative_to(root.resolve()), f
        if f["filename"] not in lines:
            lines[f["filename"]] = len(path.read_text(encoding="utf-8").splitlines())
        assert 1 <= f["location"]["row"] <= max(lines[f["filename"]], 1), f
        assert f["location"]["column"] >= 1, f


def test_every_generated_finding_carries_its_spec_origin(runs) -> None:  # noqa: ANN001
    root, [(_, report), _] = runs
    generated = [f for f in report if "generated" in Path(f["filename"]).parts]
    for f in generated:
        assert "origin" in f and f["origin"], f  # the JSON has the field: a generated finding fills it
        spec = Path(f["origin"]["filename"])
        assert spec.is_file() and "generated" not in spec.parts, f
        assert spec.name.endswith("_patch_gen_config.py"), f
        assert spec.resolve().is_relative_to(root.resolve()), f
        assert 1 <= f["origin"]["row"] <= len(spec.read_text(encoding="utf-8").splitlines()), f


def test_two_runs_print_the_same_report(runs) -> None:  # noqa: ANN001
    _, [(first, _), (second, _)] = runs
    assert first.stdout == second.stdout
    assert first.returncode == second.returncode


@pytest.mark.parametrize("name", sorted(AUDITED))
def test_audit_of_one_model_is_markdown(name: str, tmp_path: Path) -> None:
    model = shared_tree(name) / AUDITED[name]
    proc = _npu_lint("audit", str(model), cwd=tmp_path)
    assert proc.returncode in (0, 1), (proc.returncode, proc.stderr[-4000:])
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr[-4000:]
    lines = proc.stdout.splitlines()
    assert lines and lines[0].startswith("# ") and model.name in lines[0], proc.stdout[:500]
    assert any(line.startswith("## ") for line in lines), proc.stdout[:2000]
    assert any(line.startswith("|") for line in lines)  # the tables of the report
    assert list(tmp_path.iterdir()) == []  # the audit writes nothing without -o
