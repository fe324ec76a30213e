"""NPU101 on one block with 2k / 8k / 32k findings: time and work (function calls) grow linearly.

    .venv/bin/python bench/npu101_scaling.py [N ...]

The work count (every Python and C function call made by the lint, from cProfile) is deterministic; the
regression guard (tests/rules/test_scaling.py) compares its ratios, not wall-clock times.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import time

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source


def one_block(n: int) -> str:
    """A function whose body is ``n`` statements, each a NPU101 finding (``.cuda()``), after a guard."""
    return "import torch\n\n\ndef f(t):\n" + "".join(f"    a{i} = t.cuda()\n" for i in range(n))


def lint(n: int) -> int:
    src = SourceFile.from_text("scaling.py", one_block(n))
    return len(lint_source(src, ["NPU101"], Settings()))


def calls(n: int) -> int:
    """Function calls made while linting the ``n``-finding block (deterministic work)."""
    src = SourceFile.from_text("scaling.py", one_block(n))
    profile = cProfile.Profile()
    profile.enable()
    lint_source(src, ["NPU101"], Settings())
    profile.disable()
    return sum(row[1] for row in pstats.Stats(profile).stats.values())  # type: ignore[attr-defined]


def main(sizes: list[int]) -> None:
    print("| findings | seconds | µs / finding |")
    print("|---:|---:|---:|")
    for n in sizes:
        start = time.perf_counter()
        found = lint(n)
        took = time.perf_counter() - start
        assert found == n, (found, n)
        print(f"| {n} | {took:.2f} | {took / n * 1e6:.0f} |")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [2000, 8000, 32000])
