"""The audit as markdown (the JSON output is the report dict itself)."""

from __future__ import annotations

from typing import Any

from npu_lint.audit.checklist import FAIL, NOT_ATTAINABLE, PASS, UNKNOWN

_MARK = {PASS: "pass", FAIL: "FAIL", UNKNOWN: "unknown", NOT_ATTAINABLE: "not attainable on this generation"}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(report: dict[str, Any]) -> str:
    out: list[str] = []
    w = out.append
    w(f"# Migration audit: `{report['model']}`\n")
    w(f"Model directory: `{report['model_dir']}`  ")
    w(
        f"Registry rows: {report['registry_rows']}; rules run: {report['rules_run']}; "
        f"findings: {report['findings_total']}"
        + (f" (+{report['generated_copies']} generated copies)" if report.get("generated_copies") else "")
        + "\n"
    )
    w("## Files\n")
    w("| role | path | present | note |")
    w("|---|---|---|---|")
    for f in report["files"]:
        w(
            f"| {f['role']} | `{_cell(f['path'])}` | {'yes' if f['present'] else '**missing**'} | {_cell(f['note'])} |"
        )
    w("")
    w("## Reuse\n")
    w("| file / patch | status | why |")
    w("|---|---|---|")
    for r in report["reuse"]:
        w(f"| `{_cell(r['file'])}` | {r['status']} | {_cell(r['why'])} |")
    w("")
    w("## Operators\n")
    w("| op | variant | ops config field | source | GPU implementations | NPU implementation | action |")
    w("|---|---|---|---|---|---|---|")
    for o in report["ops"]:
        w(
            f"| {o['op']} | {o['variant'] or '(none registered here)'} | {o['config_field'] or '-'} | {_cell(o['source'])} | "
            f"{', '.join(o['gpu']) or '-'} | {', '.join(o['npu']) or 'none'} | {_cell(o['action'])} |"
        )
    if not report["ops"]:
        w("| - | - | - | no dispatched or recognisable operators | - | - | - |")
    w("")
    w(
        "Declarations: "
        + "; ".join(
            (f"{o['op']}/{o['variant']}" if o["variant"] else o["op"])
            + ": "
            + ", ".join(f"`{d}`" for d in o["declared"])
            for o in report["ops"]
            if o["declared"]
        )
        + "\n"
    )
    w("## GPU-only dependencies\n")
    if report["dependencies"]:
        w("| kind | name | classification | file:lines |")
        w("|---|---|---|---|")
        for d in report["dependencies"]:
            lines = ",".join(str(n) for n in d["lines"][:8] if n) + ("..." if len(d["lines"]) > 8 else "")
            w(
                f"| {d['kind']} | `{_cell(d['name'])}` | {_cell(d['classification'])} | `{d['file']}`"
                f"{':' + lines if lines else ''} |"
            )
    else:
        w("None found: no vendor imports, attention implementation names or CUDA APIs.")
    w("")
    w("## Findings by rule\n")
    if report["findings"]:
        w("| code | rule | count | first findings |")
        w("|---|---|---|---|")
        for f in report["findings"]:
            name = f["name"] + ("" if f["default_enabled"] else " (off by default)")
            w(
                f"| {f['code']} | {name} | {f['count']} | "
                + "<br>".join(_cell(e) for e in f["examples"])
                + " |"
            )
    else:
        w("No findings.")
    for err in report["errors"]:
        w(f"\n- error: {err}")
    w("")
    if report["changed_since_base"] is not None:
        w(f"## Files changed since `{report['base']}`\n")
        w("| path | category | scope |")
        w("|---|---|---|")
        for c in report["changed_since_base"]:
            w(
                f"| `{_cell(c['path'])}` | {c['category']} | "
                f"{'**out of scope**' if c['scope'] == 'out of scope' else c['scope']} |"
            )
        if not report["changed_since_base"]:
            w("| - | no changes | - |")
        w("")
    w("## Implementation steps\n")
    for i, step in enumerate(report["steps"], 1):
        w(f"{i}. {step}")
    w("")
    w("## Migration completion checklist\n")
    for c in report["checklist"]:
        codes = f" [{', '.join(c['codes'])}]" if c["codes"] else ""
        w(
            f"- [{'x' if c['status'] == PASS else ' '}] **{_MARK[c['status']]}**: {c['item']}{codes}: {c['note']}"
        )
        for e in c["evidence"]:
            w(f"  - {e}")
    return "\n".join(out) + "\n"
