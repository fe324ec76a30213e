"""NPU210: an ops-implementation config whose NPU fallback method nothing calls. Own names and shapes."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source


def _lint(code: str) -> list:
    src = SourceFile.from_text("veomni/arguments/toy_config.py", textwrap.dedent(code).lstrip())
    return lint_source(src, ["NPU210"], Settings())


_CONFIG = """
from dataclasses import dataclass, field


@dataclass
class KernelChoices:
    rope_implementation: str = field(default="liger_kernel", metadata={{"help": "GPU default"}})
    moe_implementation: str = "fused_triton"
    loss_implementation: str = "eager"

    def __post_init__(self):
        {post_init}

    def _to_npu_names(self):
        self.rope_implementation = "npu"

    def apply_npu_names(self):  # public: other modules may call it
        self._to_npu_names()
"""


def test_reported_when_only_a_public_wrapper_could_call_it_and_nobody_calls_that() -> None:
    diags = _lint(_CONFIG.format(post_init="pass"))
    assert diags == []  # `_to_npu_names` is referenced by `apply_npu_names`, which may be called elsewhere


def test_reported_when_unreferenced() -> None:
    code = _CONFIG.format(post_init="pass").replace("        self._to_npu_names()\n", "        return None\n")
    diags = _lint(code)
    assert [d.line for d in diags] == [13]
    assert "`KernelChoices._to_npu_names`" in diags[0].message
    assert "(`fused_triton`, `liger_kernel`)" in diags[0].message


def test_quiet_without_implementation_fields() -> None:
    code = """
    class Plain:
        def _npu_setup(self):
            return "npu"
    """
    assert _lint(code) == []
