"""Per-rule cost of one serial cold ``check --no-cache --jobs 1``, timed in this process.

Usage: python bench/rule_costs.py [--top N] [--json FILE] [--repeat K] [TARGET]
TARGET defaults to veomni==0.1.12 ``veomni/models`` (the tree ``bench/ab.py`` and ``bench/profile_cold.py`` use).

Every registered rule's ``__init__``, ``visit``, ``leave``, ``finish`` and ``applies_to`` and every project rule's
``check`` are wrapped here (the engine is not changed, so nothing is paid when this script is not used) and timed
with ``time.perf_counter`` (wall time: run it on a quiet machine), or with ``--cpu`` the thread's CPU time
(``time.thread_time``, steadier on a loaded machine, dearer to read); the clock's own cost per call, measured on a
no-op first, is taken off. Times are exclusive: a
timed method called from inside another (a rule calling a base class's ``visit`` through ``super()``) is charged to
itself and not to its caller. A helper memoised per file or per run is charged to whichever rule asks first. The
rest of the run (parse, the engine walk and its dispatch, the project load, pre-checks, origins, suppressions,
output) is the "outside rules" line. ``--repeat K`` runs the check K times in fresh interpreters and keeps each
rule's minimum (the per-run memos would otherwise make a second run in one process warm).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PHASES = ("init", "visit", "leave", "finish", "applies", "check")


def _default_target() -> str:
    sys.path.insert(0, str(HERE.parent / "tests"))
    from corpus import fetch_veomni

    return str(fetch_veomni() / "veomni" / "models")


def measure(target: str, cpu: bool = False) -> dict:
    """One serial cold run of ``target`` with every rule method timed: {"total": s, "rules": {code: {phase: [s, calls]}}}."""
    from npu_lint.rules.base import PROJECT_REGISTRY, REGISTRY, load_rule_modules

    load_rule_modules()
    costs: dict[str, dict[str, list[float]]] = collections.defaultdict(lambda: {p: [0.0, 0] for p in PHASES})
    clock = time.thread_time if cpu else time.perf_counter
    stack: list[list[float]] = []  # per open timed call: [time spent in timed calls nested in it]

    def timed(code: str, phase: str, fn):  # noqa: ANN001, ANN202
        cell = costs[code][phase]

        def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            nested = [0.0]
            stack.append(nested)
            start = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                spent = clock() - start
                stack.pop()
                cell[0] += spent - nested[0]
                cell[1] += 1
                if stack:
                    stack[-1][0] += spent

        return wrapper

    # what one timed call of a no-op costs in itself (the clock's own reads): taken off each call below
    probe = timed("<probe>", "visit", lambda: None)
    for _ in range(20000):
        probe()
    overhead = costs.pop("<probe>")["visit"][0] / 20000

    originals = {}
    for cls in REGISTRY.values():
        originals[cls] = {
            "init": cls.__init__,
            "visit": cls.visit,
            "leave": cls.leave,
            "finish": cls.finish,
            "applies": cls.applies_to.__func__,
        }
    for cls, methods in originals.items():
        code = cls.code
        cls.__init__ = timed(code, "init", methods["init"])
        cls.visit = timed(code, "visit", methods["visit"])
        cls.leave = timed(code, "leave", methods["leave"])
        cls.finish = timed(code, "finish", methods["finish"])
        cls.applies_to = classmethod(timed(code, "applies", methods["applies"]))
    for code, cls in PROJECT_REGISTRY.items():
        check = cls.check

        def listed(self, project, paths, _check=check):  # noqa: ANN001, ANN202
            return list(_check(self, project, paths))

        cls.check = timed(code, "check", listed)

    from npu_lint.cli import main as cli

    start = clock()
    try:
        cli(["check", "--no-cache", "--exit-zero", "-q", "--jobs", "1", target])
    except SystemExit:
        pass
    total = clock() - start
    for phases in costs.values():
        for cell in phases.values():
            cell[0] = max(0.0, cell[0] - overhead * cell[1])
    return {
        "total": total,
        "clock": "cpu" if cpu else "wall",
        "rules": {code: dict(v) for code, v in costs.items()},
    }


def _combine(runs: list[dict]) -> dict:
    """Each rule's and phase's minimum over the runs (calls from the first run)."""
    out = {"total": min(r["total"] for r in runs), "rules": {}}
    for code in runs[0]["rules"]:
        out["rules"][code] = {
            p: [min(r["rules"].get(code, {}).get(p, [0.0, 0])[0] for r in runs), runs[0]["rules"][code][p][1]]
            for p in PHASES
        }
    return out


def render(result: dict, top: int) -> str:
    rows = []
    for code, phases in result["rules"].items():
        total = sum(v[0] for v in phases.values())
        rows.append((total, code, phases))
    rows.sort(key=lambda r: (-r[0], r[1]))
    in_rules = sum(r[0] for r in rows)
    lines = [
        f"run {result['total']:.2f} s; rules {in_rules:.2f} s ({in_rules / result['total']:.0%}); "
        f"outside rules {result['total'] - in_rules:.2f} s",
        "",
        "| rule | total ms | share | visit ms (calls) | finish ms | init ms | applies_to ms | project check ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for total, code, ph in rows[:top]:
        visit = ph["visit"][0] + ph["leave"][0]
        calls = ph["visit"][1] + ph["leave"][1]
        lines.append(
            f"| {code} | {total * 1e3:.0f} | {total / result['total']:.1%} | {visit * 1e3:.0f} ({calls}) | "
            f"{ph['finish'][0] * 1e3:.0f} | {ph['init'][0] * 1e3:.0f} | {ph['applies'][0] * 1e3:.0f} | "
            f"{ph['check'][0] * 1e3:.0f} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--json", default="", help="write the measured costs here")
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs in fresh interpreters; each rule's minimum"
    )
    parser.add_argument(
        "--cpu", action="store_true", help="the thread's CPU time instead of wall time (a loaded machine)"
    )
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    parser.add_argument("target", nargs="?")
    args = parser.parse_args()
    target = args.target or _default_target()
    if args.child:  # the check's own output goes to stdout: the costs to a file
        Path(args.child).write_text(json.dumps(measure(target, args.cpu)))
        return 0
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "costs.json"
        for _ in range(args.repeat):
            cmd = [sys.executable, __file__, "--child", str(out), *(["--cpu"] if args.cpu else []), target]
            subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True, env=os.environ)
            runs.append(json.loads(out.read_text()))
    result = _combine(runs)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    print(render(result, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
