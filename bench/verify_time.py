"""Benchmark: wall time of ``npu-lint verify`` per model of VeOmni ``main``, every check, one run each.

Models: qwen3 (text), llama (text, GPU spec only), qwen3_vl (vision-language), gemma3 after npu-lint's NPU501
fix and a patchgen run (text). The tree is a copy of ``../shared/corpora/veomni-main`` (as the tests use).
Each check is a fresh interpreter (torch + transformers + veomni imported each time); the import check runs
twice (IS_NPU_AVAILABLE forced true, then false).

Usage: python bench/verify_time.py [--patchgen DIR] [--models qwen3,qwen3_vl]
The patchgen directory defaults to the tree's own ``patchgen-pkg``. A benchmark, not a test:
the target (<= 60 s per text model on 2 cores) is printed, never asserted. The CPU time (user + sys of npu-lint
and every child) is the figure to compare on a shared machine: the checks run one after another, mostly on one
core, so on an idle machine the wall time is close to it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent / "tests" / "verify"))

from corpus import VEOMNI_MAIN, shared_tree  # noqa: E402
from verify_helpers import TRANSFORMERS, make_tree, regenerate  # noqa: E402

TEXT = {"qwen3", "llama", "gemma3"}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--patchgen", default=str(shared_tree(VEOMNI_MAIN) / "patchgen-pkg"))
    parser.add_argument("--models", default="qwen3,llama,qwen3_vl,gemma3")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tree = make_tree(Path(tmp))
        for model in args.models.split(","):
            model_dir = tree / TRANSFORMERS / model
            if model == "gemma3":
                subprocess.run(
                    [sys.executable, "-m", "npu_lint", "check", "--no-cache", "--fix", "--unsafe-fixes", "-q",
                     str(model_dir)],
                    capture_output=True,
                )  # fmt: skip
                regenerate(
                    tree, "veomni.models.transformers.gemma3.gemma3_npu_patch_gen_config", Path(args.patchgen)
                )
            start = time.perf_counter()
            ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            proc = subprocess.run(
                [sys.executable, "-m", "npu_lint", "verify", str(model_dir), "--format", "json", "-q",
                 "--patchgen", args.patchgen],
                capture_output=True, text=True, env={**os.environ},
            )  # fmt: skip
            wall = time.perf_counter() - start
            ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
            report = json.loads(proc.stdout)
            checks = report["models"][0]["checks"]
            per = ", ".join(f"{c['check']} {c['duration_s']:.1f}" for c in checks)
            statuses = " ".join(f"{c['check']}={c['status']}" for c in checks)
            target = " (target <= 60 s)" if model in TEXT else ""
            rows.append((model, wall, cpu, per, statuses, target))
            print(f"{model}: {wall:.1f} s wall, {cpu:.1f} s CPU{target}; {per}; {statuses}", flush=True)
    print()
    load = os.getloadavg()[0]
    print(
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, load {load:.1f}"
    )
    print(
        "| model | wall time | CPU time (user+sys, all processes) | per check, wall (s) |\n|---|---|---|---|"
    )
    for model, wall, cpu, per, _statuses, target in rows:
        print(f"| {model} | {wall:.1f} s{target} | {cpu:.1f} s | {per} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
