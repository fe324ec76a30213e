"""What linting one file returns (``FileResult``) and the one internal-error exception: a module of its own so
that a warm run, whose files are all cache hits, builds its results without importing the file pass
(``engine.lint``: the walk, the rule base and the analysis modules they import)."""

from __future__ import annotations

from dataclasses import dataclass, field

from npu_lint.core.diagnostics import Diagnostic


class InternalError(Exception):
    """A one-line internal error; ``diagnostics``: the findings of the file's other rules (rule isolation)."""

    def __init__(self, message: str, diagnostics: list[Diagnostic] | None = None) -> None:
        super().__init__(message)
        self.diagnostics: list[Diagnostic] = diagnostics or []


@dataclass
class FileResult:
    path: str
    diagnostics: list[Diagnostic] = field(default_factory=list)
    error: str | None = None  # one-line message for an unreadable file / internal error (exit code 2)
    cached: bool = False
    size: int = -1  # bytes linted (the cache stores the result only if they are the bytes it keyed)
    digest: str = ""
    not_analysed: str = ""  # why the file was read but not analysed (said on stderr; never cached)
