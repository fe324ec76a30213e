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


def off_by_default() -> list[str]:
    """Rules a user turns on by name; the demo selects them too, so their planted bugs show."""
    return [code for code, rule in all_rules().items() if not rule.default_enabled]


def with_opt_in(*args: str) -> tuple[str, ...]:
    extra = off_by_default()
    return (*args, "--extend-select", ",".join(extra)) if extra else args


def test_every_registered_rule_fires_in_examples(demo: Path) -> None:
    proc = run(*with_opt_in("check", "--no-cache", "--output-format", "json"), "examples/", cwd=demo)
    assert proc.returncode == 1, proc.stderr  # findings, no crash (2 would be a usage/internal error)
    found = {d["code"] for d in json.loads(proc.stdout)}
    registered = set(all_rules())
    assert registered, "no rule registered"
    missing = sorted(registered - found)
    assert not missing, (
        f"rules with no finding in examples/ (plant a bug for each, see examples/README.md): {missing}"
    )


def test_statistics_lists_every_rule(demo: Path) -> None:
    proc = run(*with_opt_in("check", "--no-cache", "--statistics"), "examples/", cwd=demo)
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


# -- the tour `make demo` prints ---------------------------------------------------------------------------


def test_tour_is_short_and_complete(demo: Path) -> None:
    """`make demo`: findings by family (counts and one example each), one fix as a diff, what to run next."""
    import re

    from npu_lint.demo import family_of

    proc = run("check", "--no-cache", "--output-format", "json", "examples/", cwd=demo)
    findings = json.loads(proc.stdout)
    families = {family_of(d["code"]) for d in findings}
    tour = subprocess.run(
        [sys.executable, "-m", "npu_lint.demo", "examples/"],
        cwd=demo,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert tour.returncode == 0, tour.stderr
    lines = tour.stdout.splitlines()
    assert len(lines) <= 70, f"the tour is {len(lines)} lines: a newcomer reads it in a minute"
    assert not any("Error" in line or "Traceback" in line for line in lines)
    assert f"{len(findings)} findings in " in tour.stdout
    # one row per family, with its count, then an example location and message
    rows = {
        m.group(1): int(m.group(2)) for m in re.finditer(r"^  (\w+)\s+(\d+)  NPU\d{3}", tour.stdout, re.M)
    }
    assert set(rows) == families
    assert sum(rows.values()) == len(findings)
    for fam in families:
        at = next(i for i, line in enumerate(lines) if re.match(rf"^  {fam}\s+\d+  NPU", line))
        assert re.match(r"^\s+examples/\S+:\d+$", lines[at + 1]), lines[at + 1]
        assert re.match(r"^\s+NPU\d{3} ", lines[at + 2]), lines[at + 2]
    # one fix, as a unified diff of one file
    diff = [line.strip() for line in lines if line.startswith("  ")]
    assert any(line.startswith("--- a/examples/") for line in diff)
    assert any(line.startswith("@@ ") for line in diff)
    assert any(line.startswith("-") and not line.startswith("---") for line in diff)
    assert any(line.startswith("+") and not line.startswith("+++") for line in diff)
    # what to run next, including the full output one flag away
    assert "Next:" in lines and "make demo FULL=1" in tour.stdout
    assert snapshot(demo / "examples") == snapshot(EXAMPLES)  # the tour writes nothing


def test_make_demo_handles_the_linters_exit_code() -> None:
    """No `-` prefix in the demo recipe (make would print "Error 1 (ignored)"): exit 1 is accepted explicitly."""
    makefile = (EXAMPLES.parent / "Makefile").read_text(encoding="utf-8")
    recipe = makefile.split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    commands = [line for line in recipe.splitlines() if line.startswith("\t")]
    assert commands and not any(line.startswith("\t-") for line in commands)
    assert "npu_lint.demo" in recipe and "FULL" in recipe
    runs = [line for line in commands if "/npu-lint check" in line]
    assert runs and all("|| [ $$? -eq 1 ]" in line for line in runs)
