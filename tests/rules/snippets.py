"""A test's source snippet linted with chosen rules, as the file it names (shared by the rules' tests)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from npu_lint.core.config import Settings
from npu_lint.core.diagnostics import Diagnostic
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source


def lint_snippet(path: str, text: str, codes: Sequence[str]) -> list[Diagnostic]:
    """The findings of ``codes`` on ``text`` (dedented, its leading blank lines dropped) linted as ``path``,
    in the engine's order."""
    src = SourceFile.from_text(path, textwrap.dedent(text).lstrip("\n"))
    return [d for d in lint_source(src, list(codes), Settings()) if d.code in codes]
