"""Profile one cold ``check --no-cache`` in this process: cProfile, and every ``ast.parse`` counted by file.

Usage: python bench/profile_cold.py [--jobs N] [--out FILE.prof] TARGET
Prints the parse counts (calls, files parsed more than once, parses of text not read from a file) and the top
functions by cumulative and own time. With ``--jobs 1`` everything runs here; with a pool only the main
process (the project rules) is profiled and counted.
"""

from __future__ import annotations

import argparse
import ast
import collections
import cProfile
import pstats
import sys

COUNTS: collections.Counter[str] = collections.Counter()
_parse = ast.parse


def counting_parse(source, filename="<unknown>", *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN201
    COUNTS[str(filename)] += 1
    return _parse(source, filename, *args, **kwargs)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", default="1")
    parser.add_argument("--out", default="")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("target")
    args = parser.parse_args()
    ast.parse = counting_parse
    from npu_lint.cli import main as cli

    prof = cProfile.Profile()
    prof.enable()
    try:
        cli(["check", "--no-cache", "--exit-zero", "-q", "--jobs", args.jobs, args.target])
    except SystemExit:
        pass
    prof.disable()
    if args.out:
        prof.dump_stats(args.out)
    total = sum(COUNTS.values())
    multi = {k: v for k, v in COUNTS.items() if v > 1}
    print(
        f"ast.parse calls: {total}; distinct names: {len(COUNTS)}; names parsed more than once: {len(multi)}"
    )
    for name, n in sorted(multi.items(), key=lambda kv: -kv[1])[:15]:
        print(f"  {n:4d} {name}")
    stats = pstats.Stats(prof, stream=sys.stdout)
    print(f"function calls: {stats.total_calls}")
    stats.sort_stats("cumulative").print_stats(args.top)
    stats.sort_stats("tottime").print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
