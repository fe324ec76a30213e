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


def render_json(models: list[dict], version: str) -> str:
    doc = {
        "tool": "npu-lint verify",
        "version": version,
        "exit_code": exit_code(models),
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
    code = exit_code(models)
    summary = {0: "every check passed", 1: "a check failed", 2: "a check could not run"}[code]
    unattainable = sum(c.status == "not attainable" for m in models for c in m["checks"])
    if code == 0 and unattainable:
        summary = f"no check failed; {unattainable} not attainable on this generation"
    out.append(f"\nResult: {summary} (exit {code}).\n")
    return "".join(out)
