"""Profile one cold ``check --no-cache`` in this process: cProfile, and every ``ast.parse`` counted by file, by call
site and by text (the same characters parsed twice, whatever the filename).

Usage: python bench/profile_cold.py [--jobs N] [--out FILE.prof] [--counts-only] TARGET
Prints the parse counts (calls, files parsed more than once, parses of text not read from a file) and the top
functions by cumulative and own time. With ``--jobs 1`` everything runs here; with a pool only the main
process (the project rules) is profiled and counted.
"""

from __future__ import annotations

import argparse
import ast
import collections
import contextlib
import cProfile
import io
import os
import pstats
import sys
from pathlib import Path

COUNTS: collections.Counter[str] = collections.Counter()
SITES: collections.Counter[tuple[str, str]] = collections.Counter()
CHARS: collections.Counter[tuple[str, str]] = collections.Counter()
PATHS: collections.Counter[str] = collections.Counter()
TEXTS: dict[tuple[str, str], set[int]] = collections.defaultdict(set)
SAME: dict[int, list[str]] = collections.defaultdict(list)  # a text's hash -> the sites that parsed it
_WRAPPERS = frozenset({"_parse", "_parse_at"})  # npu_lint's parse helpers: the site is their caller
_parse = ast.parse
_ROOT = str(Path(__file__).resolve().parent.parent / "npu_lint")


def _site() -> str:
    """The first npu_lint frame above the parse (the code that asked for it), as ``module:function``."""
    frame = sys._getframe(2)
    while frame is not None:
        path = frame.f_code.co_filename
        if path.startswith(_ROOT) and frame.f_code.co_name not in _WRAPPERS:
            return f"{path[len(_ROOT) - 8 :].removesuffix('.py')}:{frame.f_code.co_name}"
        frame = frame.f_back
    return "?"


def counting_parse(source, filename="<unknown>", *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN201
    name = str(filename)
    COUNTS[name] += 1
    kind = "text" if name.startswith("<") else "file"
    if kind == "file":
        PATHS[os.path.realpath(name)] += 1
    site = (_site(), kind)
    SITES[site] += 1
    CHARS[site] += len(source) if isinstance(source, (str, bytes)) else 0
    key = hash(source.decode(errors="replace") if isinstance(source, bytes) else source)
    TEXTS[site].add(key)
    SAME[key].append(site[0])
    return _parse(source, filename, *args, **kwargs)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", default="1")
    parser.add_argument("--out", default="")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--counts-only", action="store_true", help="print the parse counts, not the profile")
    parser.add_argument("target")
    args = parser.parse_args()
    ast.parse = counting_parse
    from npu_lint.cli import main as cli

    prof = cProfile.Profile()
    prof.enable()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        cli(["check", "--no-cache", "--exit-zero", "-q", "--jobs", args.jobs, args.target])
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
    again = {k: v for k, v in PATHS.items() if v > 1}
    here = os.path.realpath(args.target)
    print(f"files parsed under the target: {sum(1 for k in PATHS if k.startswith(here + os.sep))}")
    print(
        f"files parsed: {len(PATHS)} (by real path), {sum(PATHS.values())} parses; parsed more than once: {len(again)}"
    )
    for name, n in sorted(again.items(), key=lambda kv: -kv[1])[:15]:
        print(f"  {n:4d} {name}")
    dup = {k: v for k, v in SAME.items() if len(v) > 1}
    print(
        f"texts parsed more than once (same characters): {len(dup)}, {sum(len(v) - 1 for v in dup.values())} extra parses"
    )
    by_sites = collections.Counter(" + ".join(sorted(v)) for v in dup.values())
    for sites, n in by_sites.most_common(12):
        print(f"  {n:4d} x {sites}")
    print("ast.parse calls by call site (the nearest npu_lint frame; file: a path given, text: a snippet):")
    for (site, kind), n in SITES.most_common():
        distinct = len(TEXTS[(site, kind)])
        print(f"  {n:4d} {kind:4s} ({distinct:3d} distinct) {CHARS[(site, kind)]:9d} chars  {site}")
    if args.counts_only:
        return 0
    stats = pstats.Stats(prof, stream=sys.stdout)
    print(f"function calls: {stats.total_calls}")
    stats.sort_stats("cumulative").print_stats(args.top)
    stats.sort_stats("tottime").print_stats(args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
