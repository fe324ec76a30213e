"""NPU516 checks each top-level definition once per text and module names (``Rule.report_shared``): every
verbatim copy is still reported at its own read, across lints of an edited file, and the answer follows the
module's names (part of the key)."""

from __future__ import annotations

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source

PATH = "veomni/models/transformers/toy/modeling_toy.py"

FUNC = """
def pad_{i}(x):
    return x + padding
"""


def _found(text: str) -> list[tuple[int, int]]:
    src = SourceFile.from_text(PATH, text)
    return sorted((d.line, d.col) for d in lint_source(src, ["NPU516"], Settings()) if d.code == "NPU516")


def test_verbatim_copies_each_reported_at_their_own_read() -> None:
    text = "\n".join(FUNC.format(i=0) for _ in range(3))
    found = _found(text)
    assert len(found) == 3
    assert len({line for line, _col in found}) == 3


def test_edited_file_reported_at_the_new_lines() -> None:
    text = FUNC.format(i=1)
    first = _found(text)
    moved = _found("import os\n\n" + text)
    assert len(first) == len(moved) == 1
    assert moved[0][0] == first[0][0] + 2


def test_module_names_are_part_of_the_key() -> None:
    text = FUNC.format(i=2)
    assert len(_found(text)) == 1
    assert _found("padding = 0\n" + text) == []
