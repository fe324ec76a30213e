"""Interleaved A/B timing of npu-lint builds on a noisy machine: wall time and the child's CPU time.

Usage: python bench/ab.py --rounds 5 [--mode cold|warm|floor|serial] [--tree DIR --target REL]
       NAME=SRC_DIR [NAME=SRC_DIR ...]
Each round runs every build once (in turn, the order rotating), each in a fresh interpreter with
``PYTHONPATH=SRC_DIR``, on veomni==0.1.12 ``veomni/models`` (or ``--target`` of a copy of ``--tree``'s
``veomni/`` and ``pyproject.toml``), and reads the child's user+sys CPU time from
``os.wait4``. Prints best and median per build. The parse floor (read + ``ast.parse`` of every file, one
process) is measured the same way in each round, so ratios compare like with like.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from corpus import fetch_veomni  # noqa: E402

FLOOR = (
    "import ast, pathlib, sys\n"
    "for p in sorted(pathlib.Path(sys.argv[1]).rglob('*.py')):\n"
    "    ast.parse(p.read_bytes(), filename=str(p))\n"
)


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read() if proc.stderr else b""
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{cmd}: exit {proc.returncode}\n{err.decode(errors='replace')}")
    return wall, usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--mode", choices=("cold", "warm", "serial"), default="cold")
    parser.add_argument("--tree", type=Path, help="a VeOmni checkout to lint instead of veomni==0.1.12")
    parser.add_argument("--target", default="veomni/models", help="the path linted, relative to the tree")
    parser.add_argument("builds", nargs="+", help="NAME=SRC_DIR")
    args = parser.parse_args()
    import compileall

    builds = [b.split("=", 1) for b in args.builds]
    for _, src in builds:
        compileall.compile_dir(str(Path(src) / "npu_lint"), quiet=1)
    root = args.tree or fetch_veomni()
    with tempfile.TemporaryDirectory() as tmpdir:
        work = Path(tmpdir) / "tree"
        shutil.copytree(root / "veomni", work / "veomni")
        if (root / "pyproject.toml").is_file():
            shutil.copy2(root / "pyproject.toml", work / "pyproject.toml")
        target = str(work / args.target)
        base_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        flags = {"cold": ["--no-cache"], "serial": ["--no-cache", "--jobs", "1"], "warm": []}[args.mode]
        caches = {name: str(Path(tmpdir) / f"cache-{name}") for name, _ in builds}

        def lint_cmd(name: str) -> list[str]:
            cache = [] if args.mode != "warm" else ["--cache-dir", caches[name]]
            return [sys.executable, "-m", "npu_lint", "check", "-q", "--exit-zero", *flags, *cache, target]

        if args.mode == "warm":
            for name, src in builds:
                timed(lint_cmd(name), {**base_env, "PYTHONPATH": src}, work)
        results: dict[str, list[tuple[float, float]]] = {"floor": []}
        results.update({name: [] for name, _ in builds})
        for r in range(args.rounds):
            order = builds[r % len(builds) :] + builds[: r % len(builds)]
            results["floor"].append(timed([sys.executable, "-c", FLOOR, target], base_env, work))
            for name, src in order:
                results[name].append(timed(lint_cmd(name), {**base_env, "PYTHONPATH": src}, work))
            load = os.getloadavg()[0]
            line = "  ".join(
                f"{n} {w:.3f}s/{c:.3f}cpu" for n, (w, c) in ((n, v[-1]) for n, v in results.items())
            )
            print(f"round {r + 1} (load {load:.1f}): {line}", flush=True)
        fw = min(w for w, _ in results["floor"])
        fc = min(c for _, c in results["floor"])
        print(f"\n{args.mode}: best (median) wall | best (median) cpu; ratio = best / best floor")
        for name, vals in results.items():
            walls, cpus = [w for w, _ in vals], [c for _, c in vals]
            print(
                f"{name:10s} wall {min(walls):.3f} ({statistics.median(walls):.3f}) = {min(walls) / fw:.2f}x | "
                f"cpu {min(cpus):.3f} ({statistics.median(cpus):.3f}) = {min(cpus) / fc:.2f}x"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
