"""Accuracy on the held-out sets (``bench/heldout/<round>/*.toml``), written blind by a helper session.

Each case is an exact-string edit of one file of a shared corpus tree (``../shared/corpora/<tree>/``). The runner
copies each tree once to a temporary directory, applies one edit at a time, and runs the real CLI
(``npu-lint check --output-format json --no-cache``) on the edited file's model package (or its directory), as a
user would; the findings before the edit are computed once per package. Nothing in the shared trees is written.

A bug is caught (lenient) when a finding of the expected family (``NPU1``..``NPU7``) is reported more often in the
edited file than before; strictly, when a new finding of that family lies on a line of the edited region (+-3 lines).
A control passes when no family NPU1-NPU7 reports more findings anywhere in the package than before; NPU505
(generated-file drift) is not counted for controls that edit a spec, whose generated file was not regenerated.

Usage: python bench/blind.py [--round round1] [--category loss] [--id ID] [-v] [--json FILE]
The rule authors run it only to report; they do not read the cases.
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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib

HERE = Path(__file__).resolve().parent
CORPORA = HERE.parent.parent / "shared" / "corpora"
FAMILIES = ("NPU1", "NPU2", "NPU3", "NPU4", "NPU5", "NPU6", "NPU7")
MARGIN = 3


@dataclass(frozen=True)
class Case:
    id: str
    tree: str
    file: str
    old: str
    new: str
    expect: str  # a family prefix, or "none" for a control
    category: str
    source: str = ""
    why: str = ""


@dataclass
class Outcome:
    case: Case
    lenient: bool
    strict: bool
    new_findings: list[str] = field(default_factory=list)


def load_cases(round_dir: Path) -> list[Case]:
    cases: list[Case] = []
    seen: set[str] = set()
    for path in sorted(round_dir.glob("*.toml")):
        for raw in tomllib.loads(path.read_text(encoding="utf-8")).get("case", []):
            known = {k: v for k, v in raw.items() if k in Case.__dataclass_fields__}
            case = Case(**known)
            if case.id in seen:
                raise ValueError(f"{path.name}: duplicate id {case.id}")
            seen.add(case.id)
            cases.append(case)
    return cases


def _scope(rel: str) -> str:
    """What the CLI lints for a case: the model package holding the file (its whole package, so project rules
    such as registration and spec checks see their files), else the file's directory."""
    parts = Path(rel).parts
    for marker in ("transformers", "diffusers", "seed_omni"):
        if marker in parts:
            i = parts.index(marker)
            if len(parts) > i + 2:
                return str(Path(*parts[: i + 2]))
    return str(Path(rel).parent)


class Runner:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.roots: dict[str, Path] = {}
        self.before: dict[tuple[str, str], list[dict]] = {}
        self.exe = [sys.executable, "-m", "npu_lint"]

    def root(self, tree: str) -> Path:
        if tree not in self.roots:
            dest = self.workdir / tree
            shutil.copytree(CORPORA / tree, dest, symlinks=True)
            self.roots[tree] = dest
        return self.roots[tree]

    def lint(self, root: Path, scope: str) -> list[dict]:
        env = {**os.environ, "NO_COLOR": "1"}
        proc = subprocess.run(
            [*self.exe, "check", "--no-cache", "--exit-zero", "--output-format", "json", scope],
            cwd=root, capture_output=True, text=True, env=env, timeout=600,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(
                f"npu-lint exited {proc.returncode} on {root / scope}: {proc.stderr.strip()[-500:]}"
            )
        return json.loads(proc.stdout or "[]")

    def run(self, case: Case, tree_copy: Path) -> Outcome:
        path = tree_copy / case.file
        text = path.read_text(encoding="utf-8")
        if text.count(case.old) != 1:
            raise ValueError(f"{case.id}: `old` occurs {text.count(case.old)} times in {case.file}")
        scope = _scope(case.file)
        key = (case.tree, scope)
        if key not in self.before:
            self.before[key] = self.lint(tree_copy, scope)
        start = text.index(case.old)
        first = text.count("\n", 0, start) + 1
        last = first + case.new.count("\n")
        path.write_text(text.replace(case.old, case.new), encoding="utf-8")
        try:
            after = self.lint(tree_copy, scope)
        finally:
            path.write_text(text, encoding="utf-8")
        delta = case.new.count("\n") - case.old.count("\n")
        return judge(case, self.before[key], after, first, last, delta, str(path.relative_to(tree_copy)))


def _fam(code: str) -> str:
    return code[:4]


def judge(
    case: Case, before: list[dict], after: list[dict], first: int, last: int, delta: int, rel: str
) -> Outcome:
    """``first``..``last``: the edited lines in the edited text; lines after them moved by ``delta``."""

    def counts(found: list[dict], only_file: bool) -> Counter:
        return Counter(_fam(d["code"]) for d in found if not only_file or in_file(d))

    def in_file(d: dict) -> bool:
        return Path(d["filename"]).as_posix().endswith(rel)

    def row_before(d: dict) -> int:
        row = d["location"]["row"]
        return row - delta if in_file(d) and row > last else row

    remaining = Counter((d["code"], d["filename"], d["location"]["row"]) for d in before)
    fresh = []
    for d in after:
        k = (d["code"], d["filename"], row_before(d))
        if remaining[k]:
            remaining[k] -= 1
        else:
            fresh.append(d)
    if case.expect == "none":
        # a finding on a line the edit replaced has no row to match by: for a control, one of the same code on
        # the replaced lines before the edit (the same call, rewritten) is the same finding
        old_last = last - delta
        region_left = Counter(
            d["code"]
            for d in before
            if in_file(d)
            and first <= d["location"]["row"] <= old_last
            and remaining[(d["code"], d["filename"], d["location"]["row"])]
        )
        kept = []
        for d in fresh:
            if in_file(d) and first <= d["location"]["row"] <= last and region_left[d["code"]]:
                region_left[d["code"]] -= 1
            else:
                kept.append(d)
        fresh = kept
    shown = [
        f"{Path(d['filename']).name}:{d['location']['row']} {d['code']} {d['message'][:140]}" for d in fresh
    ]
    if case.expect == "none":
        b_all, a_all = counts(before, False), counts(after, False)
        ignored_drift = case.file.endswith("_patch_gen_config.py")
        extra = [
            d for d in fresh
            if _fam(d["code"]) in FAMILIES and not (ignored_drift and d["code"] == "NPU505")
        ]  # fmt: skip
        ok = not extra and all(a_all[f] <= b_all[f] for f in FAMILIES if not ignored_drift or f != "NPU5")
        return Outcome(case, ok, ok, shown)
    b_file, a_file = counts(before, True), counts(after, True)
    lenient = a_file[case.expect] > b_file[case.expect] or any(
        d["code"].startswith(case.expect) and in_file(d) for d in fresh
    )
    strict = any(
        d["code"].startswith(case.expect)
        and in_file(d)
        and first - MARGIN <= d["location"]["row"] <= last + MARGIN
        for d in fresh
    )
    return Outcome(case, lenient, strict, shown)


def table(outcomes: list[Outcome]) -> str:
    rows = [
        "| category | bugs | caught (file) | caught (at the edited lines) | controls quiet |",
        "|---|---|---|---|---|",
    ]
    cats = sorted({o.case.category for o in outcomes})
    total = [0, 0, 0, 0, 0]
    for cat in cats:
        mine = [o for o in outcomes if o.case.category == cat]
        bugs = [o for o in mine if o.case.expect != "none"]
        ctl = [o for o in mine if o.case.expect == "none"]
        vals = [
            len(bugs),
            sum(o.lenient for o in bugs),
            sum(o.strict for o in bugs),
            sum(o.lenient for o in ctl),
            len(ctl),
        ]
        total = [a + b for a, b in zip(total, vals)]
        rows.append(f"| {cat} | {vals[0]} | {vals[1]} | {vals[2]} | {vals[3]} of {vals[4]} |")
    rows.append(f"| all | {total[0]} | {total[1]} | {total[2]} | {total[3]} of {total[4]} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--round", default="round1")
    parser.add_argument("--category")
    parser.add_argument("--id")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--json", help="write per-case outcomes to this file")
    args = parser.parse_args(argv)
    cases = load_cases(HERE / "heldout" / args.round)
    if args.category:
        cases = [c for c in cases if c.category == args.category]
    if args.id:
        cases = [c for c in cases if c.id == args.id]
    with tempfile.TemporaryDirectory(prefix="npu-lint-blind-") as tmp:
        runner = Runner(Path(tmp))
        # one worker per tree copy: edits of one copy are applied one at a time
        by_tree: dict[str, list[Case]] = {}
        for c in cases:
            by_tree.setdefault(c.tree, []).append(c)

        def work(tree: str) -> list[Outcome]:
            root = runner.root(tree)
            return [runner.run(c, root) for c in by_tree[tree]]

        with ThreadPoolExecutor(max_workers=2) as pool:
            outcomes = [o for part in pool.map(work, sorted(by_tree)) for o in part]
    outcomes.sort(key=lambda o: (o.case.category, o.case.id))
    for o in outcomes:
        bug = o.case.expect != "none"
        if args.verbose or not o.lenient:
            mark = (
                ("ok  " if o.strict else "file" if o.lenient else "MISS")
                if bug
                else ("ok  " if o.lenient else "FP  ")
            )
            print(f"{mark} {o.case.id:<48} {o.case.expect:<5} {o.case.tree}:{o.case.file}")
            if args.verbose or not bug:
                for m in o.new_findings:
                    print(f"       {m}")
    print()
    print(table(outcomes))
    if args.json:
        data = [
            {"id": o.case.id, "category": o.case.category, "expect": o.case.expect, "lenient": o.lenient,
             "strict": o.strict, "new_findings": o.new_findings}
            for o in outcomes
        ]  # fmt: skip
        Path(args.json).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
