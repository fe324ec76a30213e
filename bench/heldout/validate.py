#!/usr/bin/env python3
"""Validate the held-out cases (stdlib only, Python 3.11+)."""

import ast
import sys
from pathlib import Path

import tomllib

HERE = Path(__file__).resolve().parent
CORPORA = (HERE / "../../../shared/corpora").resolve()
if not CORPORA.is_dir():
    CORPORA = Path("/work/shared/corpora")
FAMILIES = {f"NPU{i}" for i in range(1, 8)} | {"none"}
CATEGORIES = {"loss", "multimodal", "device", "dispatch", "vendor", "rmsnorm", "history", "distributed"}
REQUIRED = ("id", "tree", "file", "old", "new", "expect", "category", "source", "why")


def main(argv):
    rounds = [Path(a) for a in argv[1:]] or sorted(p for p in HERE.iterdir() if p.is_dir())
    errors, seen, counts = [], set(), {}
    for rdir in rounds:
        for toml_path in sorted(rdir.glob("*.toml")):
            data = tomllib.loads(toml_path.read_text())
            for i, case in enumerate(data.get("case", [])):
                where = f"{toml_path.name}[{i}] {case.get('id', '?')}"
                missing = [k for k in REQUIRED if not isinstance(case.get(k), str) or not case.get(k)]
                if missing:
                    errors.append(f"{where}: missing/empty {missing}")
                    continue
                key = (rdir.name, case["id"])
                if key in seen:
                    errors.append(f"{where}: duplicate id")
                seen.add(key)
                if case["expect"] not in FAMILIES:
                    errors.append(f"{where}: bad expect {case['expect']!r}")
                if case["category"] not in CATEGORIES:
                    errors.append(f"{where}: bad category {case['category']!r}")
                if toml_path.stem != case["category"]:
                    errors.append(f"{where}: category {case['category']} in {toml_path.name}")
                path = CORPORA / case["tree"] / case["file"]
                if not path.is_file():
                    errors.append(f"{where}: no file {path}")
                    continue
                text = path.read_text()
                n = text.count(case["old"])
                if n != 1:
                    errors.append(f"{where}: old occurs {n} times")
                    continue
                if case["old"] == case["new"]:
                    errors.append(f"{where}: old == new")
                edited = text.replace(case["old"], case["new"], 1)
                try:
                    ast.parse(edited)
                except SyntaxError as exc:
                    errors.append(f"{where}: edited file does not parse: {exc}")
                kind = "control" if case["expect"] == "none" else "bug"
                counts.setdefault(case["category"], {"bug": 0, "control": 0})[kind] += 1
    for e in errors:
        print("ERROR", e)
    for cat, c in sorted(counts.items()):
        print(f"{cat:12s} bugs={c['bug']:3d} controls={c['control']:3d}")
    print(f"{len(seen)} cases, {len(errors)} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
