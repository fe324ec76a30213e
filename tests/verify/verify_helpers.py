"""Helpers of the ``verify`` tests (see conftest.py for the trees they run on)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from corpus import veomni_wheel_root

TRANSFORMERS = "veomni/models/transformers"

RUFF_SETTINGS = """\
[tool.ruff]
target-version = "py311"
line-length = 119

[tool.ruff.lint]
select = ["B", "C", "E", "F", "I", "W"]
ignore = ["B905", "C901", "E501", "E741", "W605", "C408"]

[tool.ruff.lint.isort]
lines-after-imports = 2
known-first-party = ["veomni"]
known-third-party = ["torch", "transformers", "wandb"]
"""


def make_tree(dest: Path) -> Path:
    """A writable VeOmni tree: the wheel's ``veomni`` package and the checkout's ruff settings."""
    shutil.copytree(
        veomni_wheel_root() / "veomni", dest / "veomni", ignore=shutil.ignore_patterns("__pycache__")
    )
    (dest / "pyproject.toml").write_text(RUFF_SETTINGS, encoding="utf-8")
    return dest


def run_verify(*args: str, timeout: float = 900) -> tuple[int, dict | str, str]:
    """``npu-lint verify ...`` as a user runs it; the JSON report is parsed when asked for."""
    proc = subprocess.run(
        [sys.executable, "-m", "npu_lint", "verify", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(Path(__file__).resolve().parents[2]),
    )
    out: dict | str = proc.stdout
    if "--format" in args and args[args.index("--format") + 1] == "json":
        out = json.loads(proc.stdout) if proc.stdout else proc.stdout
    return proc.returncode, out, proc.stderr


def statuses(report: dict, model: int = 0) -> dict[str, str]:
    return {c["check"]: c["status"] for c in report["models"][model]["checks"]}


def findings(report: dict, check: str, model: int = 0) -> list[dict[str, str]]:
    for c in report["models"][model]["checks"]:
        if c["check"] == check:
            return c["findings"]
    raise KeyError(check)


def regenerate(tree: Path, spec_module: str, patchgen: Path) -> None:
    """What the user does after creating or editing a spec: run VeOmni's patchgen."""
    out = tree / Path(*spec_module.split(".")[:-1]) / "generated"
    code = (
        "import sys; from pathlib import Path; from patchgen.run_codegen import run_codegen; "
        f"sys.exit(run_codegen({spec_module!r}, Path({str(out)!r}), save_diff=False) is None)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(patchgen)])}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    subprocess.run(
        [sys.executable, "-c", code], cwd=tree, env=env, check=True, capture_output=True, timeout=300
    )
