"""Findings byte-identical before/after a change: ``check --no-cache --output-format json`` on three trees.

Usage: python bench/same_findings.py --save DIR      (record the current code's outputs)
       python bench/same_findings.py --compare DIR   (exit 1 when any output differs)
Trees: veomni==0.1.12 ``veomni/models`` (fetched as bench/run.py does), the shared corpora's veomni-main
``veomni/models`` and veomni-op-5d90dd16 ``veomni/models_kernel``. Each is run twice: ``--jobs 1`` (serial) and
the default (a pool): both must give the same bytes.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from corpus import fetch_veomni  # noqa: E402

# ../shared/corpora from the main checkout, ../../shared/corpora from a worktree under ../wt/
CORPORA = next(
    (p / "shared" / "corpora" for p in HERE.parents if (p / "shared" / "corpora").is_dir()),
    HERE.parent.parent / "shared" / "corpora",
)


def trees() -> list[tuple[str, Path, str]]:
    return [
        ("veomni-0.1.12", fetch_veomni(), "veomni/models"),
        ("veomni-main", CORPORA / "veomni-main", "veomni/models"),
        ("veomni-op", CORPORA / "veomni-op-5d90dd16", "veomni/models_kernel"),
    ]


def run(root: Path, target: str, jobs: list[str]) -> bytes:
    cmd = [sys.executable, "-m", "npu_lint", "check", "--no-cache", "--exit-zero", "--output-format", "json"]
    proc = subprocess.run([*cmd, *jobs, target], cwd=root, capture_output=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr.decode(errors="replace"))
        raise SystemExit(f"{root}: exit {proc.returncode}")
    return proc.stdout + b"\n--- stderr ---\n" + proc.stderr


def main() -> int:
    parser = argparse.ArgumentParser()
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--save", type=Path)
    group.add_argument("--compare", type=Path)
    args = parser.parse_args()
    bad = 0
    for name, root, target in trees():
        for label, jobs in (("serial", ["--jobs", "1"]), ("pool", [])):
            out = run(root, target, jobs)
            if args.save:
                args.save.mkdir(parents=True, exist_ok=True)
                (args.save / f"{name}.{label}.json").write_bytes(out)
                print(f"{name} {label}: {len(out)} bytes saved")
                continue
            want = (args.compare / f"{name}.{label}.json").read_bytes()
            same = want == out
            bad += not same
            print(f"{name} {label}: {'identical' if same else 'DIFFERENT'} ({len(out)} bytes)")
            if not same:
                (args.compare / f"{name}.{label}.new.json").write_bytes(out)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
