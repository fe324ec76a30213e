"""The twin analyses (NPU318, NPU468, NPU465, NPU727) are shared between verbatim copies of a function
(``core.memo.by_content``): every copy is still reported at its own statement, in one file and across files and
lints, and NPU468's answer still follows the module's ``self`` attributes (part of its key)."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source

PATH = "veomni/models/transformers/toy/modeling_toy.py"

# NPU318: the key statement reads the query's cos table (``q`` left over)
LEFTOVER = """
    def rotary_{i}(q, k, cos, sin):
        q_embed = (q * cos) + (rotate_half(q) * sin)
        k_embed = (k * cos) + (rotate_half(q) * sin)
        return q_embed, k_embed
"""

# NPU468: the keys' rotary reads the queries (the rule's own example)
DIVERGES = """
    def apply_rotary_{i}(q, k, cos, sin):
        q_embed = (q * cos) + (rotate_half(q) * sin)
        k_embed = (q * cos) + (rotate_half(k) * sin)
        return q_embed, k_embed
"""

# NPU468 with the module's ``self`` attributes: the key norm read as the query's is reported only when the
# module has a ``self.k_norm`` (the expected name must exist)
METHOD = """
    class Toy(nn.Module):
        def forward(self, q, k):
            q_states = self.q_norm(q)
            k_states = self.q_norm(k)
            return q_states, k_states
"""
INIT = """
    class Norms(nn.Module):
        def __init__(self):
            self.k_norm = None
"""


def _found(text: str, code: str, path: str = PATH) -> list[tuple[int, int]]:
    src = SourceFile.from_text(path, textwrap.dedent(text).lstrip("\n"))
    return sorted((d.line, d.col) for d in lint_source(src, [code], Settings()) if d.code == code)


def _copies(template: str, n: int, same: bool = True) -> str:
    # the same text (same name) in each copy when ``same``: verbatim copies share one analysis
    return "\n\n".join(textwrap.dedent(template).format(i=0 if same else i) for i in range(n))


def test_npu318_verbatim_copies_each_reported() -> None:
    one = _found(_copies(LEFTOVER, 1), "NPU318")
    assert len(one) == 1
    three = _found(_copies(LEFTOVER, 3), "NPU318")
    assert len(three) == 3
    assert len({line for line, _ in three}) == 3  # each at its own copy's statement
    assert three == _found(_copies(LEFTOVER, 3, same=False), "NPU318")


def test_npu468_verbatim_copies_each_reported() -> None:
    three = _found(_copies(DIVERGES, 3), "NPU468")
    assert len(three) == 3
    assert len({line for line, _ in three}) == 3
    assert three == _found(_copies(DIVERGES, 3, same=False), "NPU468")
    again = _found(_copies(DIVERGES, 3), "NPU468", path="veomni/models/transformers/toy/other_toy.py")
    assert again == three  # another file, the same copies: the shared answer at this file's statements


def test_copies_across_lints_equal_a_fresh_analysis() -> None:
    text = _copies(LEFTOVER, 2) + "\n\n" + _copies(DIVERGES, 2)
    first = _found(text, "NPU318"), _found(text, "NPU468")
    edited = "# an edit above every function\n" + textwrap.dedent(text).lstrip("\n")
    second = _found(edited, "NPU318"), _found(edited, "NPU468")
    assert [(line + 1, col) for line, col in first[0]] == second[0]
    assert [(line + 1, col) for line, col in first[1]] == second[1]


def test_npu468_follows_the_modules_self_attributes() -> None:
    without = _found(METHOD, "NPU468")
    with_attr = _found(textwrap.dedent(METHOD) + "\n\n" + textwrap.dedent(INIT), "NPU468")
    assert without == []
    assert len(with_attr) == 1
    assert (
        _found(METHOD, "NPU468") == []
    )  # the same function's text again, without the attribute: still quiet
