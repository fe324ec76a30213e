"""A decoded source file: text, encoding, newline style, and position conversions.

``ast`` reports columns as UTF-8 byte offsets within a line; everything else in npu-lint counts code
points. This module is the one place that converts between them.
"""

from __future__ import annotations

import ast
import codecs
import functools
import io
import itertools
import os
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import PurePath

_LINE_SPLIT = re.compile(r"\r\n|\r|\n")
GENERATED_BANNER = "AUTO-GENERATED FILE - DO NOT EDIT"


class DecodeError(Exception):
    """The bytes of a file could not be decoded with its declared (or default) encoding."""

    def __init__(self, message: str, line: int = 1) -> None:
        super().__init__(message)
        self.line = line


_WIDE_BOMS = (
    (codecs.BOM_UTF32_LE, "UTF-32 (little-endian, with BOM)"),  # before UTF-16 LE: it starts the same
    (codecs.BOM_UTF32_BE, "UTF-32 (big-endian, with BOM)"),
    (codecs.BOM_UTF16_LE, "UTF-16 (little-endian, with BOM)"),
    (codecs.BOM_UTF16_BE, "UTF-16 (big-endian, with BOM)"),
)


def decode_source(data: bytes) -> tuple[str, str]:
    """Decode bytes following PEP 263 (coding cookie) and PEP 3120 (UTF-8 default, BOM aware).

    Returns ``(text, encoding)`` where encoding is the codec name to re-encode with (``utf-8-sig`` when
    the file had a BOM, so writing it back keeps the BOM).
    """
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:  # bad cookie, or no cookie and a first line that is not UTF-8
        head = b"\n".join(data.split(b"\n", 2)[:2])
        if not re.search(rb"^[ \t\f]*#.*?coding[:=]", head, re.M):
            # no declaration at all: the true problem is the bytes (a UTF-16/32 file, latin-1 without cookie)
            bom = next((n for b, n in _WIDE_BOMS if data.startswith(b)), None)
            if bom:
                raise DecodeError(
                    f"cannot decode as utf-8: the file is {bom} (re-encode it as UTF-8)"
                ) from None
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as err:
                line = data[: err.start].count(b"\n") + 1
                raise DecodeError(
                    f"cannot decode byte {data[err.start]:#04x} as utf-8 (add a coding cookie or re-encode)",
                    line,
                ) from None
        raise DecodeError(f"invalid encoding declaration: {exc.msg}") from None
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise DecodeError(
            f"cannot decode byte {data[exc.start]:#04x} as {encoding} (add a coding cookie or re-encode)",
            line,
        ) from None
    except (LookupError, UnicodeError):
        # a cookie naming a codec that is not a text encoding (rot13, hex, base64) or refuses to decode
        # (undefined): a problem of this file, never of the run
        raise DecodeError(f"the coding cookie names {encoding!r}, which does not decode text") from None
    if encoding == "utf-8-sig" and text.startswith("\ufeff"):
        text = text[1:]
    return text, encoding


def detect_newline(text: str) -> str:
    match = _LINE_SPLIT.search(text)
    return match.group(0) if match else "\n"


@dataclass
class FileKind:
    """What role a file plays in a VeOmni tree (decided from its path and first lines, never by import)."""

    generated: bool = False
    spec: bool = False
    kernel: bool = False  # kernel/registration code under veomni/ops (not model code)
    init: bool = False
    test: bool = False

    @property
    def model_code(self) -> bool:
        return not self.kernel and not self.test


def _in_generated_dir(path: str, parts: tuple[str, ...]) -> bool:
    """Whether the file lives in a ``generated/`` directory: as typed, or once symlinks and a relative
    path are resolved (``gen -> generated``, or a bare ``extra.py`` named from inside generated/)."""
    if "generated" in parts[:-1]:
        return True
    if not path or path.startswith("<"):  # a pseudo name such as <stdin>: nothing on disk to resolve
        return False
    try:
        if _resolves_into_generated(os.path.dirname(os.path.abspath(path))):
            return True
        # a file named through a symlink (`alias.py -> generated/x.py`): where its bytes live decides
        return os.path.islink(path) and _resolves_into_generated(os.path.dirname(os.path.realpath(path)))
    except (OSError, ValueError):  # a too-long or NUL-holding path: no resolution, the typed path decided
        return False


@functools.lru_cache(maxsize=4096)
def _resolves_into_generated(directory: str) -> bool:
    """Once per directory (a file's siblings share it): realpath costs an lstat per component. Only the
    directory itself and its parent are looked at (``<package>/generated/`` and a sub-directory of it), so a
    checkout that happens to sit under a directory named ``generated`` is not all generated."""
    return "generated" in PurePath(os.path.realpath(directory)).parts[-2:]


def classify(path: str, text: str) -> FileKind:
    parts = PurePath(path.replace("\\", "/")).parts
    name = parts[-1] if parts else ""
    kind = FileKind()
    # the one place that decides "generated": the resolved directory, so no symlink or cwd hides it
    kind.generated = GENERATED_BANNER in text[:4096] or _in_generated_dir(path, parts)
    kind.spec = name.endswith("_patch_gen_config.py")
    kind.init = name == "__init__.py"
    for i in range(len(parts) - 1):
        if parts[i] == "ops" and i > 0 and parts[i - 1] == "veomni":
            kind.kernel = True
    kind.test = (
        name.startswith("test_") or name == "conftest.py" or "tests" in parts[:-1]
    ) and not kind.generated
    return kind


@dataclass
class SourceFile:
    path: str
    text: str
    encoding: str = "utf-8"
    kind: FileKind = field(default_factory=FileKind)
    _lines: list[str] | None = None
    _line_starts: list[int] | None = None

    @classmethod
    def from_text(cls, path: str, text: str, encoding: str = "utf-8") -> SourceFile:
        return cls(path, text, encoding, classify(path, text))

    @property
    def newline(self) -> str:
        return detect_newline(self.text)

    def _index(self) -> None:
        if "\r" not in self.text:  # the common case: str.split, several times faster than the regex
            lines = self.text.split("\n")
            starts = [0]
            starts.extend(itertools.accumulate([len(line) + 1 for line in lines[:-1]]))
            self._lines = lines
            self._line_starts = starts
            return
        starts = [0]
        lines = []
        pos = 0
        for match in _LINE_SPLIT.finditer(self.text):
            lines.append(self.text[pos : match.start()])
            pos = match.end()
            starts.append(pos)
        lines.append(self.text[pos:])
        self._lines = lines
        self._line_starts = starts

    @property
    def lines(self) -> list[str]:
        if self._lines is None:
            self._index()
        return self._lines  # type: ignore[return-value]

    @property
    def line_starts(self) -> list[int]:
        if self._line_starts is None:
            self._index()
        return self._line_starts  # type: ignore[return-value]

    def line_text(self, line: int) -> str:
        lines = self.lines
        return lines[line - 1] if 0 < line <= len(lines) else ""

    def line_offset(self, line: int) -> int:
        """Code point offset where 1-based ``line`` starts (clamped to the file)."""
        starts = self.line_starts
        return starts[max(1, min(line, len(starts))) - 1]

    def char_col(self, line: int, byte_col: int) -> int:
        """Convert an ``ast`` UTF-8 byte column on ``line`` (1-based) to a code point column."""
        text = self.line_text(line)
        if text.isascii():
            return byte_col
        return len(text.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))

    def offset(self, line: int, col: int) -> int:
        """Code point offset of (1-based line, code point column)."""
        starts = self.line_starts
        if line - 1 >= len(starts):
            return len(self.text)
        return starts[line - 1] + col

    def position(self, offset: int) -> tuple[int, int]:
        """(1-based line, code point column) of a code point offset."""
        import bisect

        starts = self.line_starts
        idx = bisect.bisect_right(starts, offset) - 1
        return idx + 1, offset - starts[idx]

    def node_range(self, node: ast.AST) -> tuple[int, int]:
        """Start/end code point offsets of an ``ast`` node (which must carry positions)."""
        start = self.offset(node.lineno, self.char_col(node.lineno, node.col_offset))  # type: ignore[attr-defined]
        end_line = node.end_lineno or node.lineno  # type: ignore[attr-defined]
        end = self.offset(end_line, self.char_col(end_line, node.end_col_offset))  # type: ignore[attr-defined]
        return start, end

    def segment(self, node: ast.AST) -> str:
        start, end = self.node_range(node)
        return self.text[start:end]

    def line_indent(self, line: int) -> str:
        text = self.line_text(line)
        return text[: len(text) - len(text.lstrip())]
