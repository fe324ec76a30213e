"""The report of a ``migrate`` run: markdown for people, JSON for scripts and coding agents (same data)."""

from __future__ import annotations

import difflib
import json
import time
from typing import Any

from npu_lint.migrate import MigrationResult

_STATUS = {
    "changed": "done",
    "unchanged": "nothing to change",
    "skipped": "skipped",
    "failed": "FAILED (undone)",
    "failed-check": "a check failed",
    "read": "read (no edit)",
    "passed": "passed",
}


def _text(data: bytes | None) -> str:
    return "" if data is None else data.decode("utf-8", errors="replace")


def unified_diff(result: MigrationResult, generated: bool = True) -> str:
    """The changes as one unified diff; without ``generated``, patchgen's output is summarised in one line."""
    out = []
    for rel, before, after in result.changes:
        if not generated and "/generated/" in f"/{rel}":
            n = len(_text(after).splitlines())
            out.append(f"# {rel}: written by the tree's patchgen ({n} lines; `--format json` has the diff)\n")
            continue
        lines = difflib.unified_diff(
            _text(before).splitlines(keepends=True),
            _text(after).splitlines(keepends=True),
            fromfile=f"a/{rel}" if before is not None else "/dev/null",
            tofile=f"b/{rel}",
        )
        out.extend(line if line.endswith("\n") else line + "\n" for line in lines)
    return "".join(out)


def as_data(result: MigrationResult) -> dict[str, Any]:
    run = result.run
    todo = [f"[{r.name}] {t}" for r in run.results for t in r.todo]
    return {
        "tree": str(run.real_root),
        "packages": [{"name": p.name, "module": p.module} for p in run.packages],
        "applied": run.apply,
        "ok": result.failed is None,
        "failed_step": result.failed.name if result.failed else None,
        "duration_s": round(time.perf_counter() - run.started, 1),
        "steps": [r.as_dict() for r in run.results],
        "changed_files": [
            {"path": rel, "kind": "created" if before is None else "modified"}
            for rel, before, _ in result.changes
        ],
        "written": result.written,
        "left_for_a_person": todo,
        "diff": unified_diff(result),
    }


def render_json(result: MigrationResult) -> str:
    return json.dumps(as_data(result), indent=2) + "\n"


def render_markdown(result: MigrationResult, with_diff: bool | None = None) -> str:
    data = as_data(result)
    run = result.run
    names = ", ".join(f"`{p['name']}`" for p in data["packages"])
    lines = [f"# npu-lint migrate: {names}", ""]
    if result.failed:
        lines.append(f"**Stopped at step `{result.failed.name}`**: its changes were undone; the steps before it "
                     "are kept.")  # fmt: skip
    mode = "applied (written to the tree)" if run.apply else "dry run (nothing written; `--apply` writes)"
    lines += [f"Tree: `{data['tree']}`. Mode: {mode}. Time: {data['duration_s']} s.", "", "## Steps", ""]
    lines += ["| # | step | result | files changed | time |", "|---|---|---|---|---|"]
    for i, r in enumerate(run.results, 1):
        lines.append(
            f"| {i} | {r.title} | {_STATUS.get(r.status, r.status)} | {len(r.changed)} | {r.duration:.1f} s |"
        )
    for i, r in enumerate(run.results, 1):
        if not (r.notes or r.todo or r.changed):
            continue
        lines += ["", f"### {i}. {r.name}", ""]
        lines += [f"- {n}" for n in r.notes]
        lines += [f"- changed: `{c}`" for c in r.changed if not any(c in n for n in r.notes)]
        lines += [f"- **left for a person**: {t}" for t in r.todo]
        plan = r.data.get("audit") if r.name == "audit" else None
        for pkg, audit in (plan or {}).items():  # type: ignore[union-attr]
            if audit["plan"]:
                lines += ["", f"Ordered plan for `{pkg}` (from the audit, before any edit):", ""]
                lines += [f"{j}. {s}" for j, s in enumerate(audit["plan"], 1)]
    lines += ["", "## Changed files", ""]
    if data["changed_files"]:
        lines += [f"- {c['kind']}: `{c['path']}`" for c in data["changed_files"]]
    else:
        lines.append("None: the packages are already migrated as far as this tool can take them.")
    lines += ["", "## Left for a person", ""]
    lines += [f"- {t}" for t in data["left_for_a_person"]] or ["Nothing."]
    if with_diff if with_diff is not None else not run.apply:
        diff = unified_diff(result, generated=False)
        if diff:
            lines += ["", "## Diff", "", "```diff", diff.rstrip("\n"), "```"]
    return "\n".join(lines) + "\n"
