"""Whole-file fixtures (tests/fixtures/dispatch/): expected diagnostics and the expected text after --fix.

Each ``<name>.py`` is linted under a virtual VeOmni path (fixtures live under tests/, which npu-lint treats as
test code) with the NPU2xx and NPU4xx rules; ``<name>.expected.txt`` lists ``line:col CODE`` (col 0-based),
``<name>.fixed.py`` the text after applying every fix (safe and unsafe) to a fixpoint.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import fix_source, lint_source
from npu_lint.rules.base import REGISTRY, load_rule_modules

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "dispatch"
VIRTUAL = {
    "gemma3_gpu_patch_gen_config.py": "veomni/models/transformers/gemma3/gemma3_gpu_patch_gen_config.py",
    "modeling_offset_norms.py": "veomni/models/transformers/toy/modeling_offset_norms.py",
    "kernels_rotary_npu.py": "veomni/ops/kernels/rotary/npu.py",
}
load_rule_modules()
CODES = sorted(c for c in REGISTRY if c.startswith(("NPU2", "NPU4")))


def _source(name: str) -> SourceFile:
    return SourceFile.from_text(VIRTUAL[name], (FIXTURES / name).read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", sorted(VIRTUAL))
def test_expected_diagnostics(name: str) -> None:
    diags = lint_source(_source(name), CODES, Settings())
    got = [f"{d.line}:{d.col} {d.code}" for d in diags]
    expected = (FIXTURES / name.replace(".py", ".expected.txt")).read_text(encoding="utf-8").split("\n")
    assert got == [line for line in expected if line]


@pytest.mark.parametrize("name", sorted(VIRTUAL))
def test_expected_fix(name: str) -> None:
    outcome = fix_source(_source(name), CODES, Settings(), unsafe=True)
    expected = (FIXTURES / name.replace(".py", ".fixed.py")).read_text(encoding="utf-8")
    assert outcome.text == expected
    assert not outcome.dropped
    again = fix_source(SourceFile.from_text(VIRTUAL[name], outcome.text), CODES, Settings(), unsafe=True)
    assert again.text == outcome.text
