"""Client-side helpers for the language server tests: documents, edits in client units, waiting."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from lsprotocol import types
from pytest_lsp import LanguageClient

REPO = Path(__file__).resolve().parents[2]
SERVER_COMMAND = [sys.executable, "-m", "npu_lint", "server"]


def server_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    return env


def units(text: str, encoding: str) -> int:
    if encoding == "utf-8":
        return len(text.encode("utf-8"))
    if encoding == "utf-32":
        return len(text)
    return len(text.encode("utf-16-le")) // 2


def offset_at(text: str, position: types.Position, encoding: str) -> int:
    lines = text.splitlines(keepends=True)
    offset = sum(len(line) for line in lines[: position.line])
    line = lines[position.line] if position.line < len(lines) else ""
    count = 0
    col = 0
    for char in line:
        if count >= position.character:
            break
        count += units(char, encoding)
        col += 1
    return offset + col


def apply_text_edits(text: str, edits: Sequence[types.TextEdit], encoding: str) -> str:
    spans = sorted(
        (
            (offset_at(text, e.range.start, encoding), offset_at(text, e.range.end, encoding), e.new_text)
            for e in edits
        ),
        reverse=True,
    )
    for start, end, new in spans:
        text = text[:start] + new + text[end:]
    return text


def edits_for(edit: types.WorkspaceEdit, uri: str) -> list[types.TextEdit]:
    if edit.changes is not None:
        return list(edit.changes.get(uri, []))
    out: list[types.TextEdit] = []
    for change in edit.document_changes or []:
        if isinstance(change, types.TextDocumentEdit) and change.text_document.uri == uri:
            out.extend(change.edits)  # type: ignore[arg-type]
    return out


async def wait_diagnostics(
    client: LanguageClient,
    uri: str,
    predicate: Callable[[Sequence[types.Diagnostic]], bool],
    timeout: float = 10.0,
) -> Sequence[types.Diagnostic]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        diags = client.diagnostics.get(uri)
        if diags is not None and predicate(diags):
            return diags
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for diagnostics on {uri}: last {diags!r}")
        await asyncio.sleep(0.02)


def open_document(client: LanguageClient, path: Path, text: str, version: int = 1) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    uri = path.as_uri()
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id="python", version=version, text=text)
        )
    )
    return uri


def replace_text(client: LanguageClient, uri: str, text: str, version: int) -> None:
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
        )
    )


def codes(diags: Sequence[types.Diagnostic]) -> list[str]:
    return sorted(str(d.code) for d in diags)


async def watched_globs(client: LanguageClient) -> set[str]:
    """The glob patterns of the file watchers the server registered (it registers them after `initialized`)."""
    globs: set[str] = set()
    for _ in range(250):
        globs = {
            str(w["globPattern"])  # the test client keeps the options as sent (JSON)
            for r in client.registrations  # type: ignore[attr-defined]
            if r.method == types.WORKSPACE_DID_CHANGE_WATCHED_FILES
            for w in r.register_options["watchers"]
        }
        if globs:
            break
        await asyncio.sleep(0.02)
    return globs


def glob_watches(globs: set[str], path: Path) -> bool:
    """Whether one of the LSP glob patterns matches ``path`` (``**`` any run of directories, ``*`` and ``?``
    within one name), as the client's file watcher would."""
    target = path.as_posix()
    for glob in globs:
        pattern = ""
        for part in re.split(r"(\*\*/|\*|\?)", glob):
            pattern += {"**/": "(?:[^/]*/)*", "*": "[^/]*", "?": "[^/]"}.get(part, re.escape(part))
        if re.search(r"(?:^|/)" + pattern + r"\Z", target):
            return True
    return False
