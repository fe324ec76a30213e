"""Positions and diagnostics in the client's units.

npu-lint counts code points (``Diagnostic`` columns, ``Edit`` offsets); LSP clients count UTF-16 units, or
UTF-8 / UTF-32 when negotiated. Lines are split the way both Python's tokenizer and the LSP specification do
(``\\n``, ``\\r\\n``, ``\\r``) by ``SourceFile``; the unit count of a line prefix comes from pygls' position
codec, so every encoding pygls negotiates is handled in one place.
"""

from __future__ import annotations

from pathlib import Path

from lsprotocol import types
from pygls.uris import from_fs_path
from pygls.workspace import PositionCodec

from npu_lint.core.diagnostics import SEVERITY_ERROR, Diagnostic, Edit
from npu_lint.core.source import SourceFile

SOURCE = "npu-lint"


def _units(codec: PositionCodec, text: str) -> int:
    """``codec.client_num_units(text)``; ASCII text is one unit per character in every encoding, counted without
    the codec's per-character loop (a long line with thousands of findings made publishing quadratic)."""
    return len(text) if text.isascii() else codec.client_num_units(text)


def client_position(src: SourceFile, codec: PositionCodec, line: int, col: int) -> types.Position:
    """LSP position of (1-based line, code point column)."""
    lines = src.lines
    if line > len(lines):
        last = lines[-1] if lines else ""
        return types.Position(line=max(0, len(lines) - 1), character=_units(codec, last))
    text = lines[line - 1]
    col = max(0, min(col, len(text)))
    return types.Position(line=line - 1, character=_units(codec, text[:col]))


def client_position_of_offset(src: SourceFile, codec: PositionCodec, offset: int) -> types.Position:
    line, col = src.position(max(0, min(offset, len(src.text))))
    return client_position(src, codec, line, col)


def offset_of_client_position(src: SourceFile, codec: PositionCodec, position: types.Position) -> int:
    """Code point offset into ``src.text`` of a position in client units (clamped to the document)."""
    lines = src.lines
    if position.line >= len(lines):
        return len(src.text)
    text = lines[position.line]
    if text.isascii():
        return src.line_starts[position.line] + max(0, min(position.character, len(text)))
    units = 0
    col = 0
    for char in text:
        if units >= position.character:
            break
        units += codec.client_num_units(char)
        col += 1
    return src.line_starts[position.line] + col


def client_range(
    src: SourceFile, codec: PositionCodec, line: int, col: int, end_line: int, end_col: int
) -> types.Range:
    return types.Range(
        start=client_position(src, codec, line, col),
        end=client_position(src, codec, end_line, end_col),
    )


def text_edit(
    src: SourceFile, codec: PositionCodec, edit: Edit, keep_newlines: bool = False
) -> types.TextEdit:
    """A rule's edit for the client: its ``\\n`` become the document's newline, unless ``keep_newlines`` (a
    slice of an already fixed document, whose line endings are the document's own, line by line)."""
    content = edit.content
    newline = src.newline
    if not keep_newlines and newline != "\n" and "\n" in content:
        content = content.replace("\r\n", "\n").replace("\n", newline)
    return types.TextEdit(
        range=types.Range(
            start=client_position_of_offset(src, codec, edit.start),
            end=client_position_of_offset(src, codec, edit.end),
        ),
        new_text=content,
    )


def whole_text_edit(src: SourceFile, codec: PositionCodec, new_text: str) -> types.TextEdit:
    """One edit turning ``src.text`` into ``new_text``: the changed middle only (common prefix and suffix
    kept), so the client keeps cursors and marks outside it."""
    old = src.text
    prefix = 0
    limit = min(len(old), len(new_text))
    while prefix < limit and old[prefix] == new_text[prefix]:
        prefix += 1
    suffix = 0
    while suffix < limit - prefix and old[len(old) - 1 - suffix] == new_text[len(new_text) - 1 - suffix]:
        suffix += 1
    # never split a \r\n pair (a position between them does not exist in LSP)
    while prefix > 0 and old[prefix - 1] == "\r" and prefix < len(old) and old[prefix] == "\n":
        prefix -= 1
    while (
        suffix > 0
        and old[len(old) - suffix] == "\n"
        and old[len(old) - suffix - 1 : len(old) - suffix] == "\r"
    ):
        suffix -= 1
    middle = Edit(prefix, len(old) - suffix, new_text[prefix : len(new_text) - suffix])
    return text_edit(src, codec, middle, keep_newlines=True)


def to_lsp_diagnostic(src: SourceFile, codec: PositionCodec, diag: Diagnostic) -> types.Diagnostic:
    related = None
    if diag.origin is not None:
        origin_uri = from_fs_path(str(Path(diag.origin.path).resolve())) or diag.origin.path
        line = max(0, diag.origin.line - 1)
        related = [
            types.DiagnosticRelatedInformation(
                location=types.Location(
                    uri=origin_uri,
                    range=types.Range(start=types.Position(line, 0), end=types.Position(line, 0)),
                ),
                message=diag.origin.note or "generated from this line of the patch spec: fix it there",
            )
        ]
    data: dict[str, object] = {"code": diag.code}
    if diag.fix is not None:
        data["fix"] = diag.fix.applicability.value
    return types.Diagnostic(
        range=client_range(src, codec, diag.line, diag.col, diag.end_line, diag.end_col),
        message=diag.message,
        severity=(
            types.DiagnosticSeverity.Error
            if diag.severity == SEVERITY_ERROR
            else types.DiagnosticSeverity.Warning
        ),
        code=diag.code,
        code_description=types.CodeDescription(href=diag.url),
        source=SOURCE,
        related_information=related,
        data=data,
    )
