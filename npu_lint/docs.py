"""Rule documentation rendered from the rule classes (``npu-lint rule``, docs/rules/*.md).

The "Precision on real code" section comes from one data file, npu_lint/rules/accuracy.json, written by
bench/accuracy/figures.py from the reviewed figures (bench/accuracy/reviewed.json): the one source of that text
(rule classes carry none; tests/test_docs.py checks every rule has an entry).

``python -m npu_lint.docs`` regenerates docs/rules/; tests/test_docs.py checks they are up to date.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

from npu_lint.rules.base import RuleMeta, all_rules

ACCURACY_FILE = Path(__file__).resolve().parent / "rules" / "accuracy.json"


@functools.lru_cache(maxsize=1)
def _accuracy() -> dict[str, str]:
    """code -> "Precision on real code" text, from the data file the accuracy script writes
    (bench/accuracy/figures.py from bench/accuracy/reviewed.json)."""
    try:
        data = json.loads(ACCURACY_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {code: entry["text"] for code, entry in data.get("rules", {}).items() if entry.get("text")}


def precision_text(rule: type[RuleMeta]) -> str:
    """The rule's measured accuracy, from the data file ("" when the rule has no entry)."""
    return _accuracy().get(rule.code, "")


def _fence(code: str) -> str:
    return f"```python\n{code.rstrip()}\n```"


def render_rule(rule: type[RuleMeta]) -> str:
    parts = [f"# {rule.code} `{rule.name}`", "", rule.summary, ""]
    if not rule.default_enabled:
        parts += ["*Off by default (lower confidence): enable with `--select " + rule.code + "`.*", ""]
    parts += ["## Why", "", rule.why, ""]
    precision = precision_text(rule)
    if precision:
        parts += ["## Precision on real code", "", precision, ""]
    for i, example in enumerate(rule.bad, 1):
        title = f" ({example.title})" if example.title else ""
        parts += [f"## Bad example {i}{title}", "", _fence(example.source), ""]
        if example.expected is not None:
            parts += ["Fixed:", "", _fence(example.expected), ""]
    for i, example in enumerate(rule.good, 1):
        title = f" ({example.title})" if example.title else ""
        parts += [f"## Good example {i}{title}", "", _fence(example.source), ""]
    parts += ["## Fix safety", "", rule.fix_safety, ""]
    return "\n".join(parts)


def render_index(rules: dict[str, type[RuleMeta]]) -> str:
    lines = ["# Rules", "", "Generated from the rule classes by `python -m npu_lint.docs`; do not edit.", ""]
    lines += ["| code | name | summary | default |", "|---|---|---|---|"]
    for code, rule in rules.items():
        summary = rule.summary.replace("|", "\\|")
        default = "on" if rule.default_enabled else "off"
        lines.append(f"| [{code}]({code}.md) | `{rule.name}` | {summary} | {default} |")
    return "\n".join(lines) + "\n"


def expected_docs() -> dict[str, str]:
    rules = all_rules()
    docs = {f"{code}.md": render_rule(rule) for code, rule in rules.items()}
    docs["README.md"] = render_index(rules)
    return docs


def write_docs(directory: Path) -> list[str]:
    directory.mkdir(parents=True, exist_ok=True)
    wanted = expected_docs()
    changed = []
    for name, text in wanted.items():
        path = directory / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            changed.append(name)
    for path in directory.glob("*.md"):
        if path.name not in wanted:
            path.unlink()
            changed.append(path.name)
    return changed


if __name__ == "__main__":
    target = (
        Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "docs" / "rules"
    )
    for name in write_docs(target):
        print(f"updated {target / name}")
