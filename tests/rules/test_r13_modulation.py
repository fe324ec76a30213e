"""NPU466: a module's AdaLN modulations are the reference for each other's `1 + scale`."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source

PATH = "veomni/models/diffusers/toy_dit/transformer.py"

TEXT = """
def adaln(x, context, q_shift, q_scale, shift_kv, scale_kv, eps):
    attn_input = rms_norm(x, eps=eps) * (1 + q_scale) + q_shift
    encoder_hidden_states = context * (1 + scale_kv) + shift_kv
    return attn_input, encoder_hidden_states
"""


def _lines(text: str) -> list[int]:
    src = SourceFile.from_text(PATH, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, ["NPU466"], Settings()) if d.code == "NPU466")


def test_consistent_modulations_are_quiet() -> None:
    assert _lines(TEXT) == []


def test_a_modulation_without_its_offset_is_reported() -> None:
    edited = TEXT.replace("* (1 + q_scale) + q_shift", "* q_scale + q_shift")
    assert edited != TEXT
    assert _lines(edited) == [2]


def test_a_module_whose_modulations_all_use_the_bare_scale_is_quiet() -> None:
    """A table trained around one (no `1 +` anywhere in the module) is that module's own convention."""
    text = TEXT.replace("* (1 + q_scale) + q_shift", "* q_scale + q_shift").replace(
        "* (1 + scale_kv) + shift_kv", "* scale_kv + shift_kv"
    )
    assert _lines(text) == []
