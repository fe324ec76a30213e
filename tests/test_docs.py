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


def test_precision_sections_come_from_the_accuracy_data_file() -> None:
    import json

    from npu_lint.docs import ACCURACY_FILE, precision_text
    from npu_lint.rules.base import all_rules

    data = json.loads(ACCURACY_FILE.read_text(encoding="utf-8"))["rules"]
    rules = all_rules()
    for code, entry in data.items():
        assert precision_text(rules[code]) == entry["text"]
    # the figures of bench/ACCURACY.md, not the texts that once disagreed with it
    assert "52 findings, 52 true positives" in data["NPU103"]["text"]
    assert "transformers 5.9.0 `models/`: 0 findings" in data["NPU101"]["text"]
