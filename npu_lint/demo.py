"""The tour `make demo` prints: what npu-lint finds in a tree, by family, one fix as a diff, what to run next.

    python -m npu_lint.demo [PATH]      (default: examples/)

It runs the CLI as a user would (``npu-lint check --output-format json``, then ``--diff`` on one file) and
summarises; ``make demo FULL=1`` prints the CLI's full output instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence

from npu_lint.rules.base import all_rules

WIDTH = 100
FAMILY_ORDER = (
    "syntax", "device", "dispatch", "vendor", "semantics", "packaging", "distributed", "multimodal",
)  # fmt: skip
PREFERRED_FIX = ("NPU101", "NPU102", "NPU103")  # a small, self-explaining diff first


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "npu_lint", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )


def family_of(code: str) -> str:
    """The rule's family: its package under npu_lint/rules (device, dispatch, ...)."""
    rule = all_rules().get(code)
    parts = rule.__module__.split(".") if rule is not None else []
    return parts[2] if len(parts) > 3 else "other"


def _short(text: str, room: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= room else text[: room - 3].rstrip() + "..."


def _rel(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def hunk_at(diff: str, row: int, limit: int = 20) -> list[str]:
    """The file headers and the hunk of a unified diff that changes line ``row`` of the old file (the first
    hunk when none does), at most ``limit`` lines."""
    lines = diff.splitlines()
    headers = [line for line in lines[:2] if line.startswith(("---", "+++"))]
    hunks: list[list[str]] = []
    for line in lines[len(headers) :]:
        if line.startswith("@@"):
            hunks.append([line])
        elif hunks:
            hunks[-1].append(line)
    if not hunks:
        return []

    def covers(hunk: list[str]) -> bool:
        try:
            start, _, count = hunk[0].split()[1][1:].partition(",")
            return int(start) <= row < int(start) + int(count or 1)
        except ValueError:
            return False

    chosen = next((h for h in hunks if covers(h)), hunks[0])
    return [*headers, *chosen][:limit]


def tour(path: str) -> tuple[int, list[str]]:
    """(exit code, lines): 0 when the tour could be made, 2 when npu-lint failed."""
    proc = _cli("check", "--no-cache", "--exit-zero", "--output-format", "json", path)
    if proc.returncode != 0:
        return 2, [f"npu-lint failed on {path} (exit {proc.returncode}):", *proc.stderr.splitlines()[-5:]]
    findings = json.loads(proc.stdout or "[]")
    out = [f"npu-lint tour of {path}", ""]
    if not findings:
        return 0, [*out, "No findings.", "", "Next: npu-lint rule --all   # what npu-lint looks for"]
    files = {d["filename"] for d in findings}
    out.append(
        f"{len(findings)} findings in {len(files)} files. (`npu-lint check` exits 1 when it finds something: "
        "expected here, the tree is GPU-only.)"
    )
    out += ["", "By family (count, then one example):"]
    by_family: dict[str, list[dict]] = {}
    for d in findings:
        by_family.setdefault(family_of(d["code"]), []).append(d)
    order = [f for f in FAMILY_ORDER if f in by_family] + sorted(set(by_family) - set(FAMILY_ORDER))
    for fam in order:
        group = by_family[fam]
        codes = sorted({d["code"] for d in group})
        span = codes[0] if len(codes) == 1 else f"{codes[0]}-{codes[-1]}"
        out.append(f"  {fam:<12} {len(group):>3}  {span}")
        ex = next((d for d in group if "/generated/" not in d["filename"]), group[0])
        where = f"{_rel(ex['filename'])}:{ex['location']['row']}"
        out.append(f"       {_short(where, WIDTH - 7)}")
        out.append(f"       {ex['code']} {_short(ex['message'], WIDTH - 14)}")
    kinds = Counter((d.get("fix") or {}).get("applicability") for d in findings)
    out += [
        "",
        f"Fixes: {kinds.get('safe', 0)} safe (`--fix`), {kinds.get('unsafe', 0)} unsafe (`--fix --unsafe-fixes`), "
        f"{kinds.get('display', 0)} shown only; {kinds.get(None, 0)} findings need a person.",
    ]
    safe = [d for d in findings if (d.get("fix") or {}).get("applicability") == "safe"]
    pick = next((d for code in PREFERRED_FIX for d in safe if d["code"] == code), safe[0] if safe else None)
    if pick is not None:
        diff = _cli("check", "--no-cache", "--diff", "--select", pick["code"], _rel(pick["filename"]))
        hunk = hunk_at(diff.stdout, pick["location"]["row"])
        if hunk:
            out += ["", f"One fix, as a diff ({pick['code']}, safe; nothing is written):"]
            out += [f"  {line}" for line in hunk]
    rule = pick["code"] if pick is not None else findings[0]["code"]
    steps = [
        (f"npu-lint check {path} --statistics", "every rule's count"),
        (f"npu-lint rule {rule}", "why a rule fires, with examples"),
        (f"npu-lint check --diff --unsafe-fixes {path}", "every fix, as a diff (writes nothing)"),
        ("make demo FULL=1", "the full output of both commands"),
    ]
    pad = max(len(cmd) for cmd, _ in steps) + 2
    out += ["", "Next:", *(f"  {cmd:<{pad}}# {what}" for cmd, what in steps)]
    return 0, out


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    code, lines = tour(args[0] if args else "examples/")
    stream = sys.stdout if code == 0 else sys.stderr
    try:
        stream.write("\n".join(lines) + "\n")
        stream.flush()
    except BrokenPipeError:
        return 141
    return code


if __name__ == "__main__":
    raise SystemExit(main())
