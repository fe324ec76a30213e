"""Helpers of the ``verify`` tests (see conftest.py for the trees they run on)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from corpus import VEOMNI_MAIN, copy_writable, shared_tree

TRANSFORMERS = "veomni/models/transformers"


def make_tree(dest: Path, *, patchgen: bool = True) -> Path:
    """A writable copy of VeOmni ``main`` (``../shared/corpora/veomni-main``): its ``veomni`` package, its
    ``pyproject.toml`` (pin, ``[tool.patchgen]``, ruff settings) and, unless ``patchgen=False``, its
    ``patchgen-pkg`` (which ``verify`` finds in a checkout by itself)."""
    ignore = ["__pycache__"] if patchgen else ["__pycache__", "patchgen-pkg"]
    shutil.copytree(
        shared_tree(VEOMNI_MAIN),
        dest,
        ignore=shutil.ignore_patterns(*ignore),
        dirs_exist_ok=True,
        copy_function=copy_writable,  # the corpora are read-only; --fix refuses read-only files
    )
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
