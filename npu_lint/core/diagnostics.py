"""Core result types: Edit, Fix, Applicability, Origin, Diagnostic.

Positions inside a file are kept in two forms:

* ``Edit.start`` / ``Edit.end`` are offsets (in code points) into the decoded text of the file, so an
  edit maps 1:1 onto a text replacement (and onto an LSP ``TextEdit`` after a position conversion).
* ``Diagnostic.line`` / ``end_line`` are 1-based, ``col`` / ``end_col`` 0-based, in code points.
  Reporters convert to the unit their format needs (1-based columns, UTF-16 units for SARIF/LSP).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Any


class Applicability(str, enum.Enum):
    """How far a fix can be trusted."""

    SAFE = "safe"  # keeps behaviour; applied by --fix
    UNSAFE = "unsafe"  # may change behaviour; applied only with --unsafe-fixes
    DISPLAY = "display"  # shown to the user, never applied

    def __str__(self) -> str:
        return self.value


_UNPRINTABLE: dict[int, str] = {
    **{c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))},
    **{c: f"\\x{c - 0xDC00:02x}" for c in range(0xDC80, 0xDD00)},  # undecodable bytes (surrogateescape)
    **{c: f"\\u{c:04x}" for c in (*range(0xD800, 0xDC80), *range(0xDD00, 0xE000))},  # other lone surrogates
    0x2028: "\\u2028",
    0x2029: "\\u2029",
    0x202E: "\\u202e",  # right-to-left override
}


def display_path(text: str) -> str:
    """A file name (or any text from the file system) safe to print on a terminal: control characters (escape
    sequences, newlines), bidirectional overrides and undecodable bytes shown as ``\\xNN`` / ``\\uNNNN``."""
    if text.isprintable() and text.isascii():
        return text
    return text.translate(_UNPRINTABLE)


_SGR = re.compile(r"(\x1b\[[0-9;]*m)")


def terminal_text(text: str) -> str:
    """A whole report for a terminal: every control character escaped (``display_path``) except line breaks,
    tabs and the colour sequences npu-lint itself writes (SGR ``ESC[...m``)."""
    if text.isascii() and text.isprintable():
        return text
    parts = _SGR.split(text)
    for i in range(0, len(parts), 2):  # the odd parts are colour sequences
        parts[i] = "\n".join(
            "\t".join(display_path(x) for x in line.split("\t")) for line in parts[i].split("\n")
        )
    return "".join(parts)


def text_hash(text: str) -> str:
    """The content hash an edit's ``Fix.basis`` names: sha256 of the decoded text (UTF-8)."""
    import hashlib

    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, order=True)
class Edit:
    """Replace ``text[start:end]`` with ``content``. Offsets count code points of the decoded file."""

    start: int
    end: int
    content: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "content": self.content}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Edit:
        return cls(data["start"], data["end"], data["content"])


@dataclass(frozen=True)
class CreateFile:
    """A fix may create a new file (e.g. an NPU sibling spec). ``path`` is absolute or cwd-relative."""

    path: str
    content: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "content": self.content}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CreateFile:
        return cls(data["path"], data["content"])


CREATES_FILE_REASON = "creates a new file (nothing imports it yet): creating a file is never a safe fix"
# a direct reference to a fixer function: its dotted path (``Fix.builder``, ``ProjectRule.fixer``)
_FIXER_REF = re.compile(r"npu_lint\.fixers(?:\.[A-Za-z_]\w*)+:[A-Za-z_]\w*")


def is_fixer_ref(ref: object) -> bool:
    """``"npu_lint.fixers.<module>:<function>"``: the only way a rule names the fixer that builds its fix."""
    return isinstance(ref, str) and _FIXER_REF.fullmatch(ref) is not None


@dataclass(frozen=True)
class Fix:
    title: str
    edits: tuple[Edit, ...] = ()
    applicability: Applicability = Applicability.SAFE
    creates: tuple[CreateFile, ...] = ()
    reason: str = ""  # why the fix is unsafe / display-only
    # True when the edits were not computed because the run does not apply fixes (a plain `check`):
    # expensive fixes (libcst / astroid codemods) are built only by `--fix`, `--diff` and editor actions.
    deferred: bool = False
    # the fixer that builds the edits of a deferred fix: its dotted path ``"npu_lint.fixers.<module>:<function>"``
    # (``is_fixer_ref``), imported by the engine in fix mode (``npu_lint.fixers.resolve``): rules never import fixers.
    builder: str | None = None
    # the content hash (``text_hash``) of the text the edits were computed on, for fixes computed away from
    # the fixing pass (project rules): an edit is applied only to that very text.
    basis: str = ""

    def __post_init__(self) -> None:
        # creating a file is never a safe fix: a new module nothing imports yet (an NPU spec) belongs to
        # --unsafe-fixes (and to a migration), never to a plain --fix
        if self.creates and self.applicability is Applicability.SAFE:
            object.__setattr__(self, "applicability", Applicability.UNSAFE)
            object.__setattr__(self, "reason", self.reason or CREATES_FILE_REASON)

    @property
    def is_applicable(self) -> bool:
        return self.applicability is not Applicability.DISPLAY and bool(
            self.edits or self.creates or self.deferred
        )

    def applies(self, unsafe: bool = False) -> bool:
        """Whether ``--fix`` applies it (safe fixes; unsafe ones too when ``unsafe``)."""
        if not self.is_applicable:
            return False
        return self.applicability is Applicability.SAFE or (
            unsafe and self.applicability is Applicability.UNSAFE
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "applicability": self.applicability.value,
            "edits": [e.to_json() for e in self.edits],
            "creates": [c.to_json() for c in self.creates],
            "reason": self.reason,
            "deferred": self.deferred,
            "builder": self.builder,
            **({"basis": self.basis} if self.basis else {}),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Fix:
        return cls(
            data["title"],
            tuple(Edit.from_json(e) for e in data["edits"]),
            Applicability(data["applicability"]),
            tuple(CreateFile.from_json(c) for c in data.get("creates", ())),
            data.get("reason", ""),
            data.get("deferred", False),
            data.get("builder"),
            data.get("basis", ""),
        )


def fix_applicable(fix: Fix | None, unsafe: bool) -> bool:
    """Whether ``--fix`` (``--unsafe-fixes`` when ``unsafe``) applies ``fix`` (re-exported by the engine)."""
    return fix is not None and fix.applies(unsafe)


@dataclass(frozen=True)
class Origin:
    """Where a finding inside a generated file comes from (the patch spec)."""

    path: str
    line: int
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "note": self.note}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Origin:
        return cls(data["path"], data["line"], data.get("note", ""))


class Severity(str, enum.Enum):
    """How a finding is shown (LSP severity, SARIF level). A str enum: it serialises as its value."""

    ERROR = "error"
    WARNING = "warning"

    def __str__(self) -> str:
        return self.value


SEVERITY_ERROR = Severity.ERROR
SEVERITY_WARNING = Severity.WARNING


@dataclass(frozen=True)
class Diagnostic:
    code: str
    name: str
    message: str
    path: str
    line: int
    col: int
    end_line: int
    end_col: int
    fix: Fix | None = None
    origin: Origin | None = None
    severity: str = SEVERITY_WARNING
    source_line: str = field(default="", compare=False)  # text of ``line`` for excerpts

    def sort_key(self) -> tuple[str, int, int, str]:
        return (self.path, self.line, self.col, self.code)

    @property
    def url(self) -> str:
        from npu_lint import DOCS_URL

        return f"{DOCS_URL}/{self.code}.md"

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "name": self.name,
            "message": self.message,
            "path": self.path,
            "line": self.line,
            "col": self.col,
            "end_line": self.end_line,
            "end_col": self.end_col,
            "fix": self.fix.to_json() if self.fix else None,
            "origin": self.origin.to_json() if self.origin else None,
            "severity": self.severity,
            "source_line": self.source_line,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Diagnostic:
        return cls(
            data["code"],
            data["name"],
            data["message"],
            data["path"],
            data["line"],
            data["col"],
            data["end_line"],
            data["end_col"],
            Fix.from_json(data["fix"]) if data.get("fix") else None,
            Origin.from_json(data["origin"]) if data.get("origin") else None,
            Severity(data.get("severity", SEVERITY_WARNING)),
            data.get("source_line", ""),
        )

    def replace(self, **changes: Any) -> Diagnostic:
        from dataclasses import replace

        return replace(self, **changes)
