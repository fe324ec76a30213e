"""Recall on injected bugs: exact-string edits of real ``veomni==0.1.12`` files, applied one at a time.

Each entry of ``bench/injections/*.toml`` names a wheel file (relative to the wheel root), an ``old`` string
that occurs exactly once in it, the ``new`` string, and ``expect``: the rule code that must report the bug,
or ``"none"`` for a control (an edit that is correct and must not add any finding of the codes below).
``mode = "keep"`` is for edits that hide an existing finding behind a name (an import alias, a registry
object): the expected code must be reported as often as before the edit.

The edited text is linted in memory under the file's own path (its kind -- generated, spec, plain -- and
the project index are those of the real tree); nothing is written. A bug is caught when the expected code
is reported more often after the edit than before it (``keep``: at least as often, and at least once).
A control passes when no code of CODES (NPU1xx-NPU4xx, NPU7xx) is reported more often than before.

Usage: python bench/inject.py [--family NPU1] [--id ID] [-v]   (prints recall per family; exit 1 on a
malformed entry). ``tests/integration/test_injections.py`` runs every entry and pins the results.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

CODES = [
    "NPU101", "NPU102", "NPU103", "NPU104", "NPU105",
    "NPU201", "NPU202", "NPU203", "NPU204", "NPU205", "NPU206",
    "NPU301", "NPU302",
    "NPU401", "NPU402", "NPU403", "NPU404", "NPU405", "NPU406",
    "NPU411", "NPU412", "NPU413", "NPU414", "NPU415",
    "NPU701", "NPU702", "NPU703", "NPU704", "NPU705",
]  # fmt: skip


@dataclass(frozen=True)
class Injection:
    id: str
    file: str
    old: str
    new: str
    expect: str  # a code, or "none" for a control
    mode: str = "new"  # "new" or "keep"
    shape: str = ""
    source: str = ""  # where the shape comes from (the issue, a VeOmni commit, ...)

    @property
    def family(self) -> str:
        return "control" if self.expect == "none" else self.expect[:4] + "xx"


@dataclass
class Outcome:
    injection: Injection
    ok: bool
    before: Counter
    after: Counter
    messages: list[str]


def load_injections(directory: Path = HERE / "injections") -> list[Injection]:
    out: list[Injection] = []
    seen: set[str] = set()
    for path in sorted(directory.glob("*.toml")):
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        for raw in data.get("injection", []):
            inj = Injection(**raw)
            if inj.id in seen:
                raise ValueError(f"{path.name}: duplicate id {inj.id}")
            seen.add(inj.id)
            out.append(inj)
    return out


class Runner:
    def __init__(self, root: Path, codes: list[str] | None = None) -> None:
        from npu_lint.core.config import Settings
        from npu_lint.rules.base import all_rules
        from npu_lint.veomni.project import load_project

        known = set(all_rules())
        self.codes = [c for c in (codes or CODES) if c in known]
        self.root = root
        self.settings = Settings()
        # the wheel is of the OpSlot generation: under target-api "auto" NPU201 summarises each file once, so
        # recall is measured per declaration and guard, as with a handle generation targeted
        self.project = load_project([str(root / "veomni" / "models")], Settings(target_api="veomni-op"))
        self._before: dict[str, Counter] = {}

    def _lint(self, path: Path, text: str) -> list:
        from npu_lint.core.source import SourceFile
        from npu_lint.engine.lint import lint_source

        src = SourceFile.from_text(str(path), text, "utf-8")
        return lint_source(src, self.codes, self.settings, self.project)

    def counts(self, path: Path, text: str) -> tuple[Counter, list]:
        diags = self._lint(path, text)
        return Counter(d.code for d in diags), diags

    def run(self, inj: Injection) -> Outcome:
        path = self.root / inj.file
        text = path.read_text(encoding="utf-8")
        n = text.count(inj.old)
        if n != 1:
            raise ValueError(f"{inj.id}: `old` occurs {n} times in {inj.file}")
        before = self._before.get(inj.file)
        if before is None:
            before = self._before[inj.file] = self.counts(path, text)[0]
        after, diags = self.counts(path, text.replace(inj.old, inj.new))
        if inj.expect == "none":
            ok = all(after[c] <= before[c] for c in after)
        elif inj.mode == "keep":
            ok = after[inj.expect] >= max(before[inj.expect], 1)
        else:
            ok = after[inj.expect] > before[inj.expect]
        messages = [f"{d.line}: {d.code} {d.message}" for d in diags if after[d.code] != before[d.code]]
        return Outcome(inj, ok, before, after, messages)


def recall_table(outcomes: list[Outcome]) -> list[tuple[str, int, int]]:
    per: dict[str, list[bool]] = {}
    for o in outcomes:
        per.setdefault(o.injection.family, []).append(o.ok)
    return [(fam, sum(v), len(v)) for fam, v in sorted(per.items())]


def markdown(outcomes: list[Outcome]) -> str:
    """The per-rule table and one row per entry (bench/accuracy/injections.md)."""
    bugs = [o for o in outcomes if o.injection.expect != "none"]
    lines = ["| rule | caught | injected |", "|---|---|---|"]
    for code in sorted({o.injection.expect for o in bugs}):
        mine = [o for o in bugs if o.injection.expect == code]
        lines.append(f"| {code} | {sum(o.ok for o in mine)} | {len(mine)} |")
    lines.append(f"| all | {sum(o.ok for o in bugs)} | {len(bugs)} |")
    controls = [o for o in outcomes if o.injection.expect == "none"]
    lines += ["", f"Controls silent: {sum(o.ok for o in controls)} of {len(controls)}.", "", "## Entries", ""]
    lines += ["| id | expected | file | shape | source | result |", "|---|---|---|---|---|---|"]
    for o in outcomes:
        i = o.injection
        where = i.file.replace("veomni/models/transformers/", "")
        if i.expect == "none":
            result = "silent" if o.ok else "REPORTED"
        else:
            result = "caught" if o.ok else "MISSED"
        keep = " (keep)" if i.mode == "keep" else ""
        lines.append(
            f"| `{i.id}` | {i.expect}{keep} | `{where}` | {i.shape} | {i.source or '-'} | {result} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from corpus import fetch_veomni

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", help="only entries whose expected code starts with this (or 'none')")
    parser.add_argument("--id", help="only this entry")
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--markdown", action="store_true", help="print the per-rule and per-entry tables")
    args = parser.parse_args(argv)
    injections = load_injections()
    if args.family:
        injections = [i for i in injections if i.expect.startswith(args.family)]
    if args.id:
        injections = [i for i in injections if i.id == args.id]
    runner = Runner(fetch_veomni())
    outcomes = [runner.run(i) for i in injections]
    if args.markdown:
        print(markdown(outcomes))
        return 0
    for o in outcomes:
        if args.verbose or not o.ok:
            mark = "ok  " if o.ok else "MISS" if o.injection.expect != "none" else "FP  "
            print(f"{mark} {o.injection.id:<34} {o.injection.expect:<7} {o.injection.file}")
            if args.verbose or o.injection.expect == "none":
                for m in o.messages:
                    print(f"       {m}")
    print()
    print("| family | caught | injected | recall |")
    print("|---|---|---|---|")
    for fam, ok, n in recall_table(outcomes):
        label = "controls (silent)" if fam == "control" else fam
        print(f"| {label} | {ok} | {n} | {ok / n:.2f} |")
    bugs = [o for o in outcomes if o.injection.expect != "none"]
    if bugs:
        caught = sum(o.ok for o in bugs)
        print(f"| all bugs | {caught} | {len(bugs)} | {caught / len(bugs):.2f} |")
    if args.verbose:
        print()
        print("| rule | caught | injected |")
        print("|---|---|---|")
        for code in sorted({o.injection.expect for o in bugs}):
            mine = [o for o in bugs if o.injection.expect == code]
            print(f"| {code} | {sum(o.ok for o in mine)} | {len(mine)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
