"""Benchmark: npu-lint on veomni==0.1.12's veomni/models, side by side with its baselines.

Measured in one run, on the same files, best of N:
  floor  - read + ``ast.parse`` every file in one process (the least any AST linter must do)
  cold   - ``npu-lint check --no-cache`` (a fresh process: interpreter start-up included)
  warm   - ``npu-lint check`` with a filled cache (second run)
  fix    - ``npu-lint check --fix --unsafe-fixes`` on a fresh copy of the tree (one run)
It also checks that ``npu-lint check`` of a clean tree never imports libcst.

Usage: python bench/run.py [--repeat N] [--write]   (--write updates bench/RESULTS.md)
This is a benchmark, not a test: it prints ratios; nothing asserts on timings.
"""

from __future__ import annotations

import argparse
import ast
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from corpus import VEOMNI_VERSION, fetch_veomni  # noqa: E402


def npu_lint(*args: str, cwd: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "npu_lint", *args], cwd=cwd, capture_output=True, text=True)
    return time.perf_counter() - start, proc


def floor(files: list[Path]) -> float:
    start = time.perf_counter()
    for path in files:
        ast.parse(path.read_bytes(), filename=str(path))
    return time.perf_counter() - start


def python_startup() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - start


def clean_tree_imports_libcst(tmp: Path) -> bool:
    tree = tmp / "clean"
    tree.mkdir()
    for i in range(3):
        (tree / f"m{i}.py").write_text(f"import torch\n\n\ndef f{i}(x: torch.Tensor):\n    return x * {i}\n")
    code = (
        "import sys; from npu_lint.cli import main; "
        f"rc = main(['check', '--no-cache', {str(tree)!r}]); "
        "print('LIBCST' if 'libcst' in sys.modules else 'NO-LIBCST', rc)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout
    return "NO-LIBCST" not in out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--write", action="store_true", help="write bench/RESULTS.md")
    args = parser.parse_args()

    # Byte-compile npu_lint first: with PYTHONDONTWRITEBYTECODE set (as on the CI machines) every run would
    # otherwise recompile the package from source, which no installed copy does.
    import compileall

    compileall.compile_dir(str(HERE.parent / "npu_lint"), quiet=1)
    root = fetch_veomni()
    models = root / "veomni" / "models"
    files = sorted(models.rglob("*.py"))
    lines = sum(p.read_bytes().count(b"\n") for p in files)
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        work = tmp / "tree"
        shutil.copytree(root / "veomni", work / "veomni")
        target = str(work / "veomni" / "models")
        cache = str(tmp / "cache")

        floor_s = min(floor(files) for _ in range(args.repeat))
        startup_s = min(python_startup() for _ in range(args.repeat))
        cold = []
        for _ in range(args.repeat):
            seconds, proc = npu_lint("check", "--no-cache", "--exit-zero", "-q", target, cwd=work)
            if proc.returncode != 0:
                print(proc.stderr, file=sys.stderr)
                return 1
            cold.append(seconds)
        npu_lint("check", "--cache-dir", cache, "--exit-zero", "-q", target, cwd=work)  # fill
        warm = [npu_lint("check", "--cache-dir", cache, "--exit-zero", "-q", target, cwd=work)[0]
                for _ in range(args.repeat)]  # fmt: skip
        fix_s, fix_proc = npu_lint("check", "--no-cache", "--fix", "--unsafe-fixes", "--exit-zero", "-q", target,
                                   cwd=work)  # fmt: skip
        libcst = clean_tree_imports_libcst(tmp)

    cold_s, warm_s = min(cold), min(warm)
    rows = [
        ("files / lines", f"{len(files)} / {lines}"),
        ("floor: read + ast.parse, one process", f"{floor_s:.3f} s"),
        ("python start-up (`python -c pass`)", f"{startup_s:.3f} s"),
        (
            "cold: `npu-lint check --no-cache`",
            f"{cold_s:.3f} s = {cold_s / floor_s:.2f} x floor (issue 19: <= 2.0)",
        ),
        (
            "warm: `npu-lint check` (cache filled)",
            f"{warm_s:.3f} s = {warm_s / floor_s:.2f} x floor (issue 19: <= 0.25)",
        ),
        (
            "fix: `check --fix --unsafe-fixes` (whole tree)",
            f"{fix_s:.3f} s (target <= 60 s), exit {fix_proc.returncode}",
        ),
        ("clean tree imports libcst", "yes (BAD)" if libcst else "no"),
    ]
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()}"
    report = [
        "# Benchmark results",
        "",
        f"`python bench/run.py --repeat {args.repeat}` on veomni=={VEOMNI_VERSION} `veomni/models`; best of "
        f"{args.repeat}. Machine: {machine}. Date: {time.strftime('%Y-%m-%d')}.",
        "",
        "| measure | result |",
        "|---|---|",
        *[f"| {k} | {v} |" for k, v in rows],
        "",
    ]
    text = "\n".join(report)
    print(text)
    if args.write:
        results = HERE / "RESULTS.md"
        old = results.read_text() if results.exists() else ""
        marker = "<!-- bench/run.py -->"
        rest = old.split(marker, 1)[1].split(marker, 1)[1] if old.count(marker) >= 2 else "\n" + old
        results.write_text(f"{marker}\n{text}{marker}{rest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
