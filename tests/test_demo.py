"""The demo (`make demo`): the bundled examples/ tree, linted by the CLI as a user runs it.

examples/ promises to show every rule npu-lint has. The rule codes come from the registry, so a new rule
without a planted bug in examples/ fails here.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from npu_lint.rules.base import all_rules

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "npu_lint", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


def snapshot(root: Path) -> dict[str, str]:
    """Every file under root, by relative path, with its content hash and mode."""
    return {
        str(p.relative_to(root)): f"{hashlib.sha256(p.read_bytes()).hexdigest()}:{p.stat().st_mode:o}"
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of examples/ (the CLI must not write into the repository even if a test fails)."""
    root = tmp_path_factory.mktemp("demo")
    shutil.copytree(EXAMPLES, root / "examples")
    return root


def test_every_registered_rule_fires_in_examples(demo: Path) -> None:
    proc = run("check", "--no-cache", "--output-format", "json", "examples/", cwd=demo)
    assert proc.returncode == 1, proc.stderr  # findings, no crash (2 would be a usage/internal error)
    found = {d["code"] for d in json.loads(proc.stdout)}
    registered = set(all_rules())
    assert registered, "no rule registered"
    missing = sorted(registered - found)
    assert not missing, (
        f"rules with no finding in examples/ (plant a bug for each, see examples/README.md): {missing}"
    )


def test_statistics_lists_every_rule(demo: Path) -> None:
    proc = run("check", "--no-cache", "--statistics", "examples/", cwd=demo)
    assert proc.returncode == 1, proc.stderr
    listed = {
        line.split()[1] for line in proc.stdout.splitlines() if line.strip() and line.split()[0].isdigit()
    }
    assert set(all_rules()) <= listed, sorted(set(all_rules()) - listed)


def test_unsafe_fix_diff_writes_nothing(demo: Path) -> None:
    before = snapshot(demo)
    proc = run("check", "--no-cache", "--diff", "--unsafe-fixes", "examples/", cwd=demo)
    assert proc.returncode in (0, 1), proc.stderr
    assert "Traceback" not in proc.stderr
    assert "\n--- a/examples/" in "\n" + proc.stdout and "\n+++ b/examples/" in proc.stdout
    assert any(line.startswith("@@ ") for line in proc.stdout.splitlines())
    # a fix that creates a file (NPU501's NPU sibling spec) shows as a diff from /dev/null, and is not created
    assert "--- /dev/null" in proc.stdout
    assert snapshot(demo) == before


def test_examples_readme_names_every_rule() -> None:
    readme = (EXAMPLES / "README.md").read_text(encoding="utf-8")
    missing = sorted(code for code in all_rules() if code not in readme)
    assert not missing, f"examples/README.md has no row for {missing}"
