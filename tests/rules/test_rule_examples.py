"""Every rule's documented examples are its test cases.

For each rule: each bad example must produce that rule's diagnostic (and only that rule's, when only that
rule is selected); each good example none of it; a bad example with ``fixed`` must fix (safe and unsafe
fixes, to a fixpoint) to exactly that text; a bad example without ``fixed`` must offer no applicable fix.
"""

from __future__ import annotations

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import fix_source, lint_source
from npu_lint.rules.base import REGISTRY, load_rule_modules

load_rule_modules()
FILE_RULES = sorted(REGISTRY.items())

BAD = [
    pytest.param(code, i, ex, id=f"{code}-bad{i}")
    for code, rule in FILE_RULES
    for i, ex in enumerate(rule.bad, 1)
]
GOOD = [
    pytest.param(code, i, ex, id=f"{code}-good{i}")
    for code, rule in FILE_RULES
    for i, ex in enumerate(rule.good, 1)
]


def _src(example) -> SourceFile:
    return SourceFile.from_text(example.path, example.source)


def test_every_rule_is_documented() -> None:
    for code, rule in FILE_RULES:
        assert rule.name and rule.summary and rule.why and rule.fix_safety, code
        assert rule.bad, f"{code} has no bad example"
        assert rule.good, f"{code} has no good example"


@pytest.mark.parametrize("code,index,example", BAD)
def test_bad_example_is_reported(code: str, index: int, example) -> None:
    diags = lint_source(_src(example), [code], Settings())
    assert diags, f"{code} bad example {index} produced no diagnostic"
    assert {d.code for d in diags} == {code}


@pytest.mark.parametrize("code,index,example", GOOD)
def test_good_example_is_clean(code: str, index: int, example) -> None:
    diags = lint_source(_src(example), [code], Settings())
    assert not diags, [f"{d.line}:{d.col} {d.message}" for d in diags]


@pytest.mark.parametrize("code,index,example", BAD)
def test_bad_example_fix(code: str, index: int, example) -> None:
    outcome = fix_source(_src(example), [code], Settings(), unsafe=True)
    if example.expected is None:
        assert outcome.text == example.source, "a fix was applied but the example documents none"
    else:
        assert outcome.text == example.expected
        again = fix_source(SourceFile.from_text(example.path, outcome.text), [code], Settings(), unsafe=True)
        assert again.text == outcome.text, "a second fix pass changed the text"
