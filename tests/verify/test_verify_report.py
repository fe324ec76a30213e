"""verify's result line counts what passed and what was skipped; it never says every check passed when one
did not run."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from npu_lint.verify.report import exit_code, render_json, render_markdown
from npu_lint.verify.runner import CheckResult


def models(*statuses: str) -> list[dict]:
    pkg = SimpleNamespace(package="veomni.models.transformers.toy", model_dir=Path("/tree/toy"))
    checks = [
        CheckResult(f"check{i}", s, details="no GPU" if s == "skip" else "") for i, s in enumerate(statuses)
    ]
    return [{"package": pkg, "checks": checks}]


def result_line(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("Result:"))


def test_skipped_checks_are_counted_never_all_passed() -> None:
    m = models("pass", "pass", "skip", "skip", "pass")
    line = result_line(render_markdown(m, "0"))
    assert exit_code(m) == 0
    assert line == "Result: 3 of 5 checks passed, 2 skipped (not run: see each skipped check above) (exit 0)."
    assert "every" not in line and "all" not in line
    doc = json.loads(render_json(m, "0"))
    assert doc["summary"]["pass"] == 3 and doc["summary"]["skip"] == 2
    assert doc["summary"]["text"].startswith("3 of 5 checks passed, 2 skipped")


def test_every_check_ran_and_passed() -> None:
    assert (
        result_line(render_markdown(models("pass", "pass"), "0"))
        == "Result: all 2 checks ran and passed (exit 0)."
    )


def test_failed_and_cannot_run() -> None:
    m = models("pass", "fail", "error", "skip")
    line = result_line(render_markdown(m, "0"))
    assert line == (
        "Result: 1 of 4 checks passed, 1 skipped (not run: see each skipped check above), 1 failed, "
        "1 could not run (exit 1)."
    )
