"""Do npu-lint's fixes keep a VeOmni tree's own quality gate (`make quality`: ruff check + ruff format --check
with the tree's `[tool.ruff]`)? On a copy of ../shared/corpora/veomni-main: `npu-lint check --fix` then
`--fix --unsafe-fixes` over veomni/models; for every changed or created file, the ruff findings (per file and
code) and the format check are compared with the unmodified copy.

    python bench/fix_quality_gate.py [--keep DIR] [--tree veomni-op-5d90dd16 --target veomni/models_kernel]

Prints, per run, the changed/created files and the new findings. Exit 1 when any run added a finding.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPORA = HERE.parent.parent / "shared" / "corpora"
sys.path.insert(0, str(HERE.parent / "tests"))

from corpus import copy_writable  # noqa: E402  (the corpora are read-only; a working tree is not)

RUFF = str(Path(sys.executable).parent / "ruff")


def snapshot(root: Path) -> dict[str, bytes]:
    out = {}
    for path in sorted((root / "veomni").rglob("*.py")):
        out[path.relative_to(root).as_posix()] = path.read_bytes()
    return out


def ruff_findings(root: Path, files: list[str]) -> Counter[tuple[str, str]]:
    if not files:
        return Counter()
    proc = subprocess.run(
        [RUFF, "check", "--no-cache", "--output-format", "json", "--exit-zero", *files],
        cwd=root, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    return Counter(
        (Path(d["filename"]).relative_to(root.resolve()).as_posix(), d["code"])
        for d in json.loads(proc.stdout)
    )


def unformatted(root: Path, files: list[str]) -> set[str]:
    """The files ``ruff format --check`` would reformat (one run per file: the exit code says it)."""
    out = set()
    for name in files:
        proc = subprocess.run(
            [RUFF, "format", "--no-cache", "--check", name],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if proc.returncode != 0:
            out.add(name)
    return out


def run_fix(root: Path, unsafe: bool, target: str = "veomni/models") -> subprocess.CompletedProcess[str]:
    args = ["--fix", "--unsafe-fixes"] if unsafe else ["--fix"]
    return subprocess.run(
        [sys.executable, "-m", "npu_lint", "check", "--no-cache", "--exit-zero", *args, target],
        cwd=root, capture_output=True, text=True, timeout=1800, env={**os.environ, "NO_COLOR": "1"},
    )  # fmt: skip


def gate(
    root: Path, before: dict[str, bytes], unsafe: bool, target: str = "veomni/models"
) -> dict[str, object]:
    """Fix ``root`` in place and compare the changed files with ``before`` (their texts in the clean tree)."""
    proc = run_fix(root, unsafe, target)
    after = snapshot(root)
    changed = sorted(p for p in after if before.get(p) != after[p])
    created = sorted(p for p in after if p not in before)
    existing = [p for p in changed if p in before]
    clean = root.parent / "clean"
    old = ruff_findings(clean, existing)
    new = ruff_findings(root, changed)
    added = {f"{k[0]}: {k[1]}": n - old[k] for k, n in new.items() if n > old[k]}
    fmt_added = sorted(unformatted(root, changed) - unformatted(clean, existing))
    return {
        "exit": proc.returncode,
        "stderr": proc.stderr[-2000:],
        "stdout_tail": proc.stdout[-3000:],
        "changed": changed,
        "created": created,
        "new_ruff_check": added,
        "new_ruff_format": fmt_added,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keep", type=Path)
    parser.add_argument("--tree", default="veomni-main", help="a folder of ../shared/corpora")
    parser.add_argument("--target", default="veomni/models", help="what npu-lint fixes, relative to the tree")
    args = parser.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="npu-lint-gate-"))
    base.mkdir(parents=True, exist_ok=True)
    clean = base / "clean"
    if not clean.exists():
        shutil.copytree(CORPORA / args.tree, clean, symlinks=True, copy_function=copy_writable)
    failed = False
    for unsafe in (False, True):
        work = base / ("unsafe" if unsafe else "safe")
        if work.exists():
            shutil.rmtree(work)
        shutil.copytree(clean, work, symlinks=True)
        result = gate(work, snapshot(clean), unsafe, args.target)
        label = "--fix --unsafe-fixes" if unsafe else "--fix"
        n_check = sum(result["new_ruff_check"].values())  # type: ignore[union-attr]
        n_fmt = len(result["new_ruff_format"])  # type: ignore[arg-type]
        print(f"== {label}: exit {result['exit']}, {len(result['changed'])} files changed "
              f"({len(result['created'])} created); new ruff check findings: {n_check}; "
              f"newly unformatted files: {n_fmt}")  # fmt: skip
        for key, n in sorted(result["new_ruff_check"].items()):  # type: ignore[union-attr]
            print(f"   check  {key} (+{n})")
        for path in result["new_ruff_format"]:  # type: ignore[union-attr]
            print(f"   format {path}")
        for path in result["created"]:  # type: ignore[union-attr]
            print(f"   created {path}")
        if result["exit"] != 0:
            print(result["stderr"])
        failed |= bool(n_check or n_fmt)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
