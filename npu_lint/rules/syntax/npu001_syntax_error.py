"""NPU001 syntax-error."""

from __future__ import annotations

from typing import ClassVar

from npu_lint.core.diagnostics import SEVERITY_ERROR
from npu_lint.rules.base import Example, Rule


class SyntaxErrorRule(Rule):
    """Reported by the engine itself when a file cannot be decoded or parsed; the run goes on."""

    code = "NPU001"
    name = "syntax-error"
    summary = "The file could not be decoded or parsed, so no other rule could check it."
    why = (
        "npu-lint reads code statically with Python's own parser. A file that does not parse (or whose bytes "
        "do not decode with its declared encoding) cannot be checked for migration blockers at all, so the "
        "run reports it at the error's position and continues with the other files."
    )
    bad = (Example("def forward(self, x):\n    return x.cuda(\n"),)
    good = (Example("def forward(self, x):\n    return x\n"),)
    fix_safety = "No fix: repair the syntax error by hand."
    severity: ClassVar[str] = SEVERITY_ERROR
