"""``sarif`` format: a SARIF 2.1.0 log with one run (for GitHub code scanning and other SARIF viewers).

Locations use URIs relative to the ``%SRCROOT%`` base (the project root) and 1-based regions whose columns
count UTF-16 code units, as the run's ``columnKind`` declares.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from npu_lint.core.diagnostics import SEVERITY_ERROR, Diagnostic, Fix
from npu_lint.report import RenderContext, fix_is_applicable, rule_url, utf16_column

SARIF_VERSION = "2.1.0"
SARIF_SCHEMA_URI = (
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
)
SRCROOT = "%SRCROOT%"


def _level(severity: str | None) -> str:
    return "error" if severity == SEVERITY_ERROR else "warning"


def _artifact_location(path: str, ctx: RenderContext) -> dict[str, Any]:
    rel = ctx.relpath(path)
    if rel is None:
        return {"uri": Path(os.path.abspath(path)).as_uri()}
    # a file name that is not UTF-8 (surrogateescape) is percent-encoded from its original bytes
    return {
        "uri": quote(rel.replace(os.sep, "/").encode("utf-8", "surrogateescape"), safe="/"),
        "uriBaseId": SRCROOT,
    }


def _column(line_text: str | None, col: int) -> int:
    """0-based code-point column -> 1-based UTF-16 column (code points when the line text is unknown)."""
    if line_text is None:
        return max(col, 0) + 1
    return max(utf16_column(line_text, col), 0) + 1


def _region(d: Diagnostic, ctx: RenderContext) -> dict[str, Any]:
    start_line = max(d.line, 1)
    end_line = max(d.end_line, start_line)
    start_text = ctx.line_text(d, d.line)
    start_col = _column(start_text, d.col)
    end_col = _column(start_text if end_line == d.line else ctx.line_text(d, d.end_line), d.end_col)
    region: dict[str, Any] = {
        "startLine": start_line,
        "startColumn": start_col,
        "endLine": end_line,
        "endColumn": max(end_col, start_col) if end_line == start_line else end_col,
    }
    if end_line == d.line and start_text and d.end_col > d.col:
        region["snippet"] = {"text": start_text[d.col : d.end_col]}
    return region


def _fixes(fix: Fix, d: Diagnostic, ctx: RenderContext) -> list[dict[str, Any]]:
    changes: list[dict[str, Any]] = []
    if fix.edits:
        src = ctx.source(d.path)
        if src is None:  # offsets cannot be placed without the file text
            return []
        replacements = []
        for edit in sorted(fix.edits):
            start_row, start_col = src.position(edit.start)
            end_row, end_col = src.position(edit.end)
            region = {
                "startLine": start_row,
                "startColumn": _column(src.line_text(start_row), start_col),
                "endLine": end_row,
                "endColumn": _column(src.line_text(end_row), end_col),
            }
            replacements.append({"deletedRegion": region, "insertedContent": {"text": edit.content}})
        changes.append({"artifactLocation": _artifact_location(d.path, ctx), "replacements": replacements})
    for created in fix.creates:
        empty = {"startLine": 1, "startColumn": 1, "endLine": 1, "endColumn": 1}
        changes.append(
            {
                "artifactLocation": _artifact_location(created.path, ctx),
                "replacements": [{"deletedRegion": empty, "insertedContent": {"text": created.content}}],
            }
        )
    if not changes:
        return []
    return [{"description": {"text": fix.title}, "artifactChanges": changes}]


def _rule_descriptor(code: str, examples: dict[str, Diagnostic], ctx: RenderContext) -> dict[str, Any]:
    rule = ctx.rule(code)
    example = examples.get(code)
    name = str(getattr(rule, "name", "") or (example.name if example else "") or f"{code.lower()}-rule")
    if name == code:
        name = f"{code.lower()}-rule"
    summary = str(getattr(rule, "summary", "") or (example.message if example else "") or name)
    why = str(getattr(rule, "why", "") or "").strip()
    fix_safety = str(getattr(rule, "fix_safety", "") or "")
    severity = getattr(rule, "severity", None) or (example.severity if example else None)
    url = rule_url(code)

    text_parts = [f"{code} ({name}): {summary}"]
    md_parts = [f"**{code}** (`{name}`): {summary}"]
    if why:
        text_parts.append(why)
        md_parts.append(why)
    if fix_safety:
        text_parts.append(f"Fix safety: {fix_safety}.")
        md_parts.append(f"Fix safety: **{fix_safety}**.")
    text_parts.append(f"Documentation: {url}")
    md_parts.append(f"[Documentation]({url})")

    descriptor: dict[str, Any] = {
        "id": code,
        "name": name,
        "shortDescription": {"text": summary},
        "fullDescription": {"text": why or summary, "markdown": why or summary},
        "help": {"text": "\n\n".join(text_parts), "markdown": "\n\n".join(md_parts)},
        "helpUri": url,
        "defaultConfiguration": {"level": _level(severity)},
    }
    if fix_safety:
        descriptor["properties"] = {"fixSafety": fix_safety}
    return descriptor


def _result(d: Diagnostic, rule_index: int, ctx: RenderContext) -> dict[str, Any]:
    result: dict[str, Any] = {
        "ruleId": d.code,
        "ruleIndex": rule_index,
        "level": _level(d.severity),
        "message": {"text": d.message},
        "locations": [
            {
                "physicalLocation": {
                    "artifactLocation": _artifact_location(d.path, ctx),
                    "region": _region(d, ctx),
                }
            }
        ],
    }
    if d.origin is not None:
        note = d.origin.note or "generated from this location"
        result["relatedLocations"] = [
            {
                "id": 1,
                "message": {"text": f"origin: {note}"},
                "physicalLocation": {
                    "artifactLocation": _artifact_location(d.origin.path, ctx),
                    "region": {"startLine": max(d.origin.line, 1)},
                },
            }
        ]
    if d.fix is not None and fix_is_applicable(d.fix, ctx.unsafe_fixes):
        fixes = _fixes(d.fix, d, ctx)
        if fixes:
            result["fixes"] = fixes
    return result


def build_sarif(diagnostics: Sequence[Diagnostic], ctx: RenderContext) -> dict[str, Any]:
    """The SARIF log as a JSON-ready dict."""
    import npu_lint

    examples: dict[str, Diagnostic] = {}
    for d in diagnostics:
        examples.setdefault(d.code, d)
    codes = ctx.rules_for(diagnostics)
    index = {code: i for i, code in enumerate(codes)}
    driver = {
        "name": "npu-lint",
        "version": npu_lint.__version__,
        "informationUri": npu_lint.INFO_URL,
        "rules": [_rule_descriptor(code, examples, ctx) for code in codes],
    }
    run = {
        "tool": {"driver": driver},
        "originalUriBaseIds": {SRCROOT: {"uri": ctx.root_uri()}},
        "columnKind": "utf16CodeUnits",
        "results": [_result(d, index[d.code], ctx) for d in diagnostics],
    }
    return {"$schema": SARIF_SCHEMA_URI, "version": SARIF_VERSION, "runs": [run]}


def render_sarif(diagnostics: Sequence[Diagnostic], ctx: RenderContext) -> str:
    return json.dumps(build_sarif(diagnostics, ctx), indent=2) + "\n"
