"""Write npu_lint/rules/accuracy.json: each rule's "Precision on real code" text, from the reviewed figures.

The reviewed figures (findings, true positives, recall, notes per corpus) are kept by hand in
bench/accuracy/reviewed.json. This script recounts the findings on every corpus it can reach -- the veomni 0.1.12
wheel (``tests/corpus.py``) and a VeomniOp-era tree (``NPU_LINT_VEOMNIOP_TREE``, default the shared
``../shared/corpora/veomni-op-5d90dd16``) -- and refuses to write when a recount disagrees with the reviewed
count (the finding set changed: review it again), unless ``--force``. ``--check`` only compares. The rules' docs
(``npu-lint rule``, docs/rules/*.md) are rendered from the written file (``npu_lint.docs``).

    python bench/accuracy/figures.py [--check] [--force] [--render-only]

``--render-only`` writes the texts without recounting (a change of wording or of a review, no new count);
tests/test_docs.py checks that accuracy.json is exactly what :func:`build` makes of reviewed.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
REVIEWED = HERE / "reviewed.json"
OUT = REPO / "npu_lint" / "rules" / "accuracy.json"


def _count(path: Path) -> Counter[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "npu_lint", "check", "--select", "ALL", "--no-cache", "--exit-zero",
         "--output-format", "json", str(path)],
        capture_output=True, text=True, timeout=1800, cwd=REPO,
    )  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"npu-lint failed on {path}: {proc.stderr.strip()}")
    return Counter(d["code"] for d in json.loads(proc.stdout or "[]"))


def _corpora() -> dict[str, Path]:
    found: dict[str, Path] = {}
    sys.path.insert(0, str(REPO))
    try:
        from tests.corpus import SHARED_CORPORA, VEOMNI_OP, CorpusUnavailable, fetch_veomni

        try:
            found["wheel"] = fetch_veomni() / "veomni" / "models"
        except CorpusUnavailable as exc:
            print(f"wheel not available: {exc}", file=sys.stderr)
    finally:
        sys.path.pop(0)
    tree = Path(os.environ.get("NPU_LINT_VEOMNIOP_TREE", SHARED_CORPORA / VEOMNI_OP))
    if (tree / "veomni").is_dir():
        found["veomniop"] = tree
    return found


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def render(code: str, entry: dict, labels: dict[str, str]) -> str:
    """The docs text of one rule from its reviewed rows."""
    parts = []
    for row in entry.get("rows", []):
        text = f"{labels.get(row['corpus'], row['corpus'])}: {_plural(row['findings'], 'finding')}"
        tp = row.get("true_positives")
        fp, debatable = row.get("false_positives"), row.get("debatable", 0)
        if row["findings"] and tp is not None and fp is not None:  # a review that classed every finding
            text += (
                f", {_plural(tp, 'true positive')}, {_plural(fp, 'false positive')}, {debatable} debatable"
            )
            if tp + fp:
                text += f" (precision {tp / (tp + fp):.2f}, counting debatable as wrong {tp / row['findings']:.2f})"
        elif row["findings"] and tp is not None:
            text += f", {_plural(tp, 'true positive')} (precision {tp / row['findings']:.2f})"
        if row.get("recall"):
            text += f", recall {row['recall']}"
        if row.get("note"):
            text += f" ({row['note']})"
        parts.append(text)
    out = "; ".join(parts) + ("." if parts else "")
    if entry.get("note"):
        out = f"{out} {entry['note']}".strip()
    if entry.get("review"):
        out += f" Reviewed by hand: {entry['review']}."
    injected = entry.get("injected")
    if injected:
        out += f" Dev-set recall on injected bugs (written with the rules; one at a time, {injected['source']}): {injected['recall']}."
    return out


# held-out categories (bench/heldout/<round>/<category>.toml) -> the rule codes they grade
HELDOUT_FAMILIES = {
    "device": ("NPU1",),
    "dispatch": ("NPU2",),
    "vendor": ("NPU3",),
    "rmsnorm": ("NPU40", "NPU410", "NPU43"),  # NPU401-410, NPU430-439
    "loss": (*(f"NPU41{i}" for i in range(1, 10)), "NPU42", "NPU44"),  # NPU411-419, NPU420-429, NPU440-449
    "multimodal": ("NPU7",),
}


def _rounds_newest_first(heldout: dict) -> list[tuple[str, dict]]:
    return sorted(heldout.items(), key=lambda kv: int(kv[0].removeprefix("round") or 0), reverse=True)


def render_heldout(code: str, heldout: dict) -> str:
    """The blind figures of the category a rule belongs to: the held-out round in full (with its provenance),
    then every dev round (a round the rule authors have since read) in one compact list, newest first; the
    provenance of each round is in bench/accuracy/heldout.md."""
    held, dev = [], []
    for name, rnd in _rounds_newest_first(heldout):
        for category, fig in sorted(rnd.get("categories", {}).items()):
            if not any(code.startswith(p) for p in HELDOUT_FAMILIES.get(category, ())):
                continue
            if rnd.get("status") == "held-out":
                before = fig.get("before_rule_work")
                held.append(
                    f"Family `{category}` on bench/heldout/{name} (held-out, written blind; {rnd['when']}): "
                    f"{fig['caught']} of {fig['bugs']} bugs caught in the edited file, {fig['at_lines']} at the "
                    f"edited lines; controls quiet {fig['controls_quiet']} of {fig['controls']}"
                    + (
                        f" (before any rule work graded on it: {before['caught']} caught, "
                        f"{before['at_lines']} at the lines)."
                        if before
                        else "."
                    )
                )
                continue
            first = fig.get("first_measured")
            dev.append(
                f"{name} {fig['caught']} of {fig['bugs']} ({fig['at_lines']} at the lines, controls "
                f"{fig['controls_quiet']} of {fig['controls']}"
                + (f"; {first['caught']} when held out)" if first else ")")
            )
    if dev:
        held.append(
            f"Family `{category_of(code)}` on the earlier rounds, now dev sets (read by the rule authors since; "
            "bugs caught in the edited file, newest first; provenance in bench/accuracy/heldout.md): "
            + ", ".join(dev)
            + "."
        )
    return " ".join(held)


def category_of(code: str) -> str:
    """The held-out category whose families include ``code`` ("" when none does)."""
    return next((c for c, prefixes in HELDOUT_FAMILIES.items() if code.startswith(prefixes)), "")


def build(reviewed: dict) -> dict:
    """The content of npu_lint/rules/accuracy.json for the reviewed figures (pure)."""
    labels = reviewed["corpora"]
    heldout = reviewed.get("heldout", {})
    return {
        "_comment": "Written by bench/accuracy/figures.py from bench/accuracy/reviewed.json; do not edit.",
        "heldout": heldout,
        "rules": {
            code: {
                "text": " ".join(
                    t for t in (render(code, entry, labels), render_heldout(code, heldout)) if t
                ),
                "rows": entry.get("rows", []),
                "review": entry.get("review"),
            }
            for code, entry in sorted(reviewed["rules"].items())
        },
    }


def dump(data: dict) -> str:
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="compare recounts with the reviewed figures only"
    )
    parser.add_argument("--force", action="store_true", help="write even when a recount disagrees")
    parser.add_argument(
        "--render-only", action="store_true", help="write the texts without recounting the corpora"
    )
    args = parser.parse_args(argv)
    reviewed = json.loads(REVIEWED.read_text(encoding="utf-8"))
    disagreements = []
    for corpus, path in ({} if args.render_only else _corpora()).items():
        counts = _count(path)
        for code, entry in reviewed["rules"].items():
            for row in entry.get("rows", []):
                if row["corpus"] == corpus and counts.get(code, 0) != row["findings"]:
                    disagreements.append(
                        f"{code} on {corpus}: {counts.get(code, 0)} now, {row['findings']} reviewed"
                    )
        print(f"recounted {corpus} ({path}): {sum(counts.values())} findings", file=sys.stderr)
    for line in disagreements:
        print(f"disagrees: {line}", file=sys.stderr)
    if args.check:
        return 1 if disagreements else 0
    if disagreements and not args.force:
        print("not written: review the changed findings, update reviewed.json, run again", file=sys.stderr)
        return 1
    OUT.write_text(dump(build(reviewed)), encoding="utf-8")
    print(f"wrote {OUT.relative_to(REPO)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
