"""The ``verify`` report: markdown for people, JSON for tools."""

from __future__ import annotations

import json

from npu_lint.verify.runner import CheckResult

_MARK = {
    "pass": "pass",
    "fail": "**FAIL**",
    "skip": "skipped",
    "error": "cannot run",
    "not attainable": "not attainable on this generation",  # isolation on an OpSlot tree: not a failure
}


def exit_code(models: list[dict]) -> int:
    statuses = [c.status for m in models for c in m["checks"]]
    if "fail" in statuses:
        return 1
    if "error" in statuses:
        return 2
    return 0


def counts(models: list[dict]) -> dict[str, int]:
    """How many checks passed, failed, were skipped and could not run (``error``), over every model."""
    out = {"pass": 0, "fail": 0, "skip": 0, "error": 0, "not attainable": 0}
    for m in models:
        for c in m["checks"]:
            out[c.status] = out.get(c.status, 0) + 1
    return out


def summary(models: list[dict]) -> str:
    """The result line: how many checks passed and how many were skipped; "every check passed" only when
    every check ran and passed."""
    n = counts(models)
    total = sum(n.values())
    if total and n["pass"] == total:
        return f"all {total} checks ran and passed"
    parts = [f"{n['pass']} of {total} checks passed"]
    if n["skip"]:
        parts.append(f"{n['skip']} skipped (not run: see each skipped check above)")
    if n["not attainable"]:
        parts.append(f"{n['not attainable']} not attainable on this generation (not a failure)")
    if n["fail"]:
        parts.append(f"{n['fail']} failed")
    if n["error"]:
        parts.append(f"{n['error']} could not run")
    return ", ".join(parts)


def render_json(models: list[dict], version: str) -> str:
    doc = {
        "tool": "npu-lint verify",
        "version": version,
        "exit_code": exit_code(models),
        "summary": {**counts(models), "text": summary(models)},
        "models": [
            {
                "model_dir": str(m["package"].model_dir),
                "package": m["package"].package,
                "checks": [c.as_dict() for c in m["checks"]],
            }
            for m in models
        ],
    }
    return json.dumps(doc, indent=2, default=str) + "\n"


def _fence(text: str) -> str:
    lang = "diff" if text.lstrip().startswith("---") else ""
    return f"```{lang}\n{text.rstrip()}\n```\n"


def render_markdown(models: list[dict], version: str) -> str:
    out = [f"# npu-lint verify (npu-lint {version})\n"]
    for m in models:
        pkg = m["package"]
        checks: list[CheckResult] = m["checks"]
        out.append(f"\n## {pkg.package}\n")
        out.append(f"`{pkg.model_dir}`\n")
        out.append("\n| check | result | time |\n|---|---|---|\n")
        for c in checks:
            out.append(f"| {c.name} | {_MARK.get(c.status, c.status)} | {c.duration:.1f} s |\n")
        for c in checks:
            if c.status == "pass" and not c.details:
                continue
            out.append(f"\n### {c.name}: {_MARK.get(c.status, c.status)}\n")
            for f in c.findings:
                out.append(f"\n- {f['what']}\n  - what it means: {f['meaning']}\n  - fix: {f['fix']}\n")
            if c.details:
                out.append("\n" + _fence(c.details))
    out.append(f"\nResult: {summary(models)} (exit {exit_code(models)}).\n")
    return "".join(out)
