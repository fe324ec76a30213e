"""The fuzzing harness of tests/fuzz/ with a longer budget (issue 22).

    .venv/bin/python bench/fuzz.py [EXAMPLES] [--random]

Runs every property of tests/fuzz/ with ``EXAMPLES`` examples each (default 500; CI runs
``tests/fuzz/strategies.CI_EXAMPLES`` with a fixed seed), new random inputs with ``--random``, and prints one
line per property (passed / the falsifying example hypothesis reports) and the time taken. What the fuzzer
found is in bench/accuracy/robustness.md.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    examples = int(args[0]) if args else 500
    env = {**os.environ, "NPU_LINT_FUZZ_EXAMPLES": str(examples)}
    if "--random" in sys.argv:
        env["NPU_LINT_FUZZ_RANDOM"] = "1"
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", "--hypothesis-show-statistics",
         "tests/fuzz"],
        cwd=REPO, env=env, capture_output=True, text=True,
    )  # fmt: skip
    took = time.perf_counter() - start
    print(
        f"tests/fuzz with {examples} examples per property ({'random' if 'NPU_LINT_FUZZ_RANDOM' in env else 'seeded'})"
    )
    for line in proc.stdout.splitlines():
        if (
            re.match(r"^(PASSED|FAILED|ERROR) ", line)
            or "Falsifying example" in line
            or line.startswith("E ")
        ):
            print(line)
        elif re.match(r"^\s+\* [\d.]+%, ", line):
            print("   ", line.strip())
    print(f"{took:.0f} s, exit {proc.returncode}")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
