"""docs/rules/*.md are generated from the rule classes and the accuracy data file, and must be up to date.

The "Precision on real code" text has one source: bench/accuracy/reviewed.json, rendered by
bench/accuracy/figures.py into npu_lint/rules/accuracy.json, which `npu-lint rule` and docs/rules/ show.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

from npu_lint.docs import ACCURACY_FILE, expected_docs, render_rule
from npu_lint.rules.base import all_rules

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "rules"
REVIEWED = ROOT / "bench" / "accuracy" / "reviewed.json"


def _figures():
    spec = importlib.util.spec_from_file_location(
        "accuracy_figures", ROOT / "bench" / "accuracy" / "figures.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _section(markdown: str, title: str) -> str | None:
    """The text under ``## title`` up to the next heading, or None."""
    match = re.search(rf"^## {re.escape(title)}\n\n(.*?)\n\n(?=## |\Z)", markdown, re.S | re.M)
    return match.group(1) if match else None


def test_rule_docs_are_current() -> None:
    wanted = expected_docs()
    present = {p.name for p in DOCS.glob("*.md")}
    assert present == set(wanted), "run `python -m npu_lint.docs` (make docs)"
    for name, text in wanted.items():
        assert (DOCS / name).read_text(encoding="utf-8") == text, f"{name} is stale: run `make docs`"


def test_accuracy_file_is_what_the_script_makes_of_the_reviewed_figures() -> None:
    figures = _figures()
    reviewed = json.loads(REVIEWED.read_text(encoding="utf-8"))
    expected = figures.dump(figures.build(reviewed))
    assert ACCURACY_FILE.read_text(encoding="utf-8") == expected, (
        "run `python bench/accuracy/figures.py` (or --render-only for a change of wording)"
    )


def test_every_rule_has_one_precision_source() -> None:
    data = json.loads(ACCURACY_FILE.read_text(encoding="utf-8"))["rules"]
    rules = all_rules()
    assert set(data) == set(rules), "every rule has an entry in bench/accuracy/reviewed.json, and only rules"
    for code, rule in rules.items():
        # no second copy of the text in the rule class
        assert "precision" not in vars(rule), (
            f"{code}: remove `precision` from the class (reviewed.json has it)"
        )
        entry = data[code]["text"]
        assert entry.strip(), code
        # the rendered page (on disk) and `npu-lint rule` show exactly the data file's text
        on_disk = (DOCS / f"{code}.md").read_text(encoding="utf-8")
        assert _section(on_disk, "Precision on real code") == entry, code
        assert _section(render_rule(rule), "Precision on real code") == entry, code


def test_reviewed_figures_reach_the_pages() -> None:
    # figures of bench/ACCURACY.md, read from the rendered pages (not from the function that renders them)
    npu103 = _section((DOCS / "NPU103.md").read_text(encoding="utf-8"), "Precision on real code")
    npu101 = _section((DOCS / "NPU101.md").read_text(encoding="utf-8"), "Precision on real code")
    assert (
        npu103 is not None
        and "49 findings, 41 true positives, 1 false positive, 7 debatable (precision 0.98" in npu103
    )
    assert npu101 is not None and "transformers 5.9.0 `models/`: 0 findings" in npu101


def test_a_rule_page_gives_the_held_out_round_in_full_and_each_dev_round_in_one_clause() -> None:
    reviewed = json.loads((ROOT / "bench" / "accuracy" / "reviewed.json").read_text(encoding="utf-8"))
    heldout = reviewed["heldout"]
    held = [name for name, rnd in heldout.items() if rnd.get("status") == "held-out"]
    dev = [name for name, rnd in heldout.items() if rnd.get("status") != "held-out"]
    page = _section((DOCS / "NPU101.md").read_text(encoding="utf-8"), "Precision on real code")
    assert page is not None and held and dev
    for name in held:  # the round that grades the rules, with its provenance
        assert page.count(f"bench/heldout/{name} (held-out, written blind; {heldout[name]['when']})") == 1
    for name in dev:  # a dev round: its figure, without the provenance heldout.md keeps
        fig = heldout[name]["categories"]["device"]
        assert page.count(f"{name} {fig['caught']} of {fig['bugs']} (") == 1, name
        assert heldout[name]["when"] not in page, name


_ENTRY = re.compile(r"^( {0,12})([\w<>-]+/|[\w-]+\.py)(?=\s|$)")


def _layout_sections() -> tuple[list[str], list[tuple[int, str, int, int]]]:
    """The lines of docs/architecture.md's layout block and its entries: (indent, name, first line, end line)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = re.search(r"^## Layout\n\n```\n(.*?)\n```", text, re.S | re.M)
    assert block is not None, "docs/architecture.md has no layout block"
    lines = block.group(1).split("\n")
    entries = [(len(m.group(1)), m.group(2), i) for i, line in enumerate(lines) if (m := _ENTRY.match(line))]
    out = []
    for k, (indent, name, start) in enumerate(entries):
        end = next((s for d, _, s in entries[k + 1 :] if d <= indent), len(lines))
        out.append((indent, name, start, end))
    return lines, out


def _documented(relative: Path, lines: list[str], sections: list[tuple[int, str, int, int]]) -> bool:
    """``relative`` (a module path) is named in the section of its innermost directory the layout lists."""
    start, end, indent = 0, len(lines), -1
    for part in relative.parts[:-1]:
        inner = [s for s in sections if s[1] == f"{part}/" and start <= s[2] < end and s[0] > indent]
        if inner:
            indent, _, start, end = min(inner, key=lambda s: s[0])
    section = "\n".join(lines[start:end])
    return re.search(rf"(?<![\w.]){re.escape(relative.name)}", section) is not None


def test_every_module_is_named_in_the_architecture_layout() -> None:
    """A module of npu_lint/ or bench/ the layout block does not name fails here (rule modules excepted: the
    family line and tests/test_layout.py cover them)."""
    lines, sections = _layout_sections()
    modules = [*sorted((ROOT / "npu_lint").rglob("*.py")), *sorted((ROOT / "bench").rglob("*.py"))]
    unnamed = []
    for path in modules:
        relative = path.relative_to(ROOT)
        if path.name in ("__init__.py", "__main__.py") and relative.parent != Path("npu_lint/fixers"):
            continue
        if relative.parts[:2] == ("npu_lint", "rules") and re.match(r"npu\d{3}_", path.name):
            continue
        if not _documented(relative, lines, sections):
            unnamed.append(str(relative))
    assert len(modules) > 150
    assert unnamed == [], f"modules docs/architecture.md's layout does not name: {unnamed}"
