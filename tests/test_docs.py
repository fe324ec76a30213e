"""docs/rules/*.md are generated from the rule classes and must be up to date."""

from pathlib import Path

from npu_lint.docs import expected_docs

DOCS = Path(__file__).resolve().parent.parent / "docs" / "rules"


def test_rule_docs_are_current() -> None:
    wanted = expected_docs()
    present = {p.name for p in DOCS.glob("*.md")}
    assert present == set(wanted), "run `python -m npu_lint.docs` (make docs)"
    for name, text in wanted.items():
        assert (DOCS / name).read_text(encoding="utf-8") == text, f"{name} is stale: run `make docs`"
