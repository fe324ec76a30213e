"""The server's input paths under fuzzing: JSON-RPC framing (Content-Length parsing, recovery, absurd lengths)
through pygls' own read loop with npu-lint's ``ResyncReader``, and document sync (incremental changes in UTF-16
positions over CRLF / CR / LF text) against a reference implementation of the LSP rules."""

from __future__ import annotations

import asyncio
import io
import json
import re
import threading

from hypothesis import event, given, settings
from hypothesis import strategies as st

from .strategies import FUZZ, mutated_source
from .test_fix_fuzz import MODEL_DIR, _context

# -- framing ----------------------------------------------------------------------------------------------------


class _Inner:
    """A byte stream split into arbitrary chunks (what a pipe delivers)."""

    def __init__(self, data: bytes, cuts: list[int]) -> None:
        self.buf = io.BytesIO(data)
        self.cuts = cuts or [1 << 20]
        self.i = 0

    def _size(self) -> int:
        self.i += 1
        return max(1, self.cuts[self.i % len(self.cuts)])

    async def readline(self) -> bytes:
        return self.buf.readline(self._size())

    async def readexactly(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            more = self.buf.read(min(n - len(out), self._size()))
            if not more:
                break
            out += more
        return out


class _Protocol:
    def __init__(self) -> None:
        self.messages: list[object] = []

    def structure_message(self, data: object) -> object:
        return data

    def handle_message(self, message: object) -> None:
        self.messages.append(message)


def _deliver(data: bytes, cuts: list[int]) -> list[object]:
    from pygls.io_ import run_async

    from npu_lint.lsp.server import ResyncReader

    protocol = _Protocol()
    stop = threading.Event()
    asyncio.run(asyncio.wait_for(run_async(stop, ResyncReader(_Inner(data, cuts)), protocol), timeout=30))
    return protocol.messages


def _frame(payload: dict, delta: int = 0) -> bytes:
    body = json.dumps(payload).encode()
    return f"Content-Length: {len(body) + delta}\r\n\r\n".encode() + body


_payloads = st.builds(
    lambda i, text: {"jsonrpc": "2.0", "method": "m", "params": {"i": i, "text": text}},
    st.integers(0, 10**6),
    st.text(max_size=200),
)


@FUZZ
@given(st.lists(_payloads, min_size=1, max_size=8), st.lists(st.integers(1, 64), max_size=8))
def test_clean_frames_are_delivered_whole_whatever_the_chunking(
    payloads: list[dict], cuts: list[int]
) -> None:
    got = _deliver(b"".join(_frame(p) for p in payloads), cuts)
    assert got == payloads


@FUZZ
@given(
    st.lists(
        st.one_of(
            _payloads.map(_frame),
            st.tuples(_payloads, st.integers(-20, 40)).map(lambda t: _frame(*t)),
            st.binary(max_size=60),
            st.sampled_from(
                [
                    b"Content-Length: 99999999999999\r\n\r\n",
                    b"Content-Length: -5\r\n\r\n",
                    b"\r\n\r\n",
                    b"Content-Length: 10\r\n",
                    b"Content-Type: x\r\n",
                    b"Content-Length: 3\r\n\r\n{}}",
                ]
            ),  # fmt: skip
        ),
        max_size=10,
    ),
    st.lists(st.integers(1, 64), max_size=6),
    _payloads,
)
def test_hostile_framing_never_crashes_and_a_clean_tail_gets_through(
    pieces: list[bytes], cuts: list[int], last: dict
) -> None:
    """Garbage, wrong and absurd lengths: the loop never raises or hangs. After a blank line and an intact
    frame repeated three times, that frame is delivered (a pending body may swallow one copy, not all)."""
    tail = _frame(last)
    got = _deliver(b"".join(pieces) + b"\r\n" + tail + tail + tail, cuts)
    event(f"delivered last: {last in got}")
    assert last in got


def test_absurd_content_length_allocates_nothing() -> None:
    from npu_lint.lsp.server import MAX_MESSAGE, ResyncReader

    class Never:
        async def readexactly(self, n: int) -> bytes:
            raise AssertionError("read an absurd length")

    assert asyncio.run(ResyncReader(Never()).readexactly(MAX_MESSAGE + 1)) == b" "


# -- document sync ----------------------------------------------------------------------------------------------

_LINES = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def _utf16_len(s: str) -> int:
    return len(s.encode("utf-16-le")) // 2


def _offset(text: str, line: int, character: int) -> int:
    """The LSP rule: lines end at \\r\\n, \\r or \\n; ``character`` counts UTF-16 code units."""
    lines = _LINES.findall(text)
    if line >= len(lines):
        return len(text)
    start = sum(len(x) for x in lines[:line])
    body = lines[line].rstrip("\r\n")
    units = 0
    for i, ch in enumerate(body):
        if units >= character:
            return start + i
        units += _utf16_len(ch)
    return start + len(body)


@st.composite
def _edits(draw: st.DrawFn, text: str) -> list[tuple[tuple[int, int], tuple[int, int], str]]:
    out = []
    current = text
    for _ in range(draw(st.integers(1, 6))):
        lines = _LINES.findall(current) or [""]

        def position(lines: list[str] = lines) -> tuple[int, int]:
            line = draw(st.integers(0, len(lines) - 1))
            body = lines[line].rstrip("\r\n")
            cols = [0]
            for ch in body:
                cols.append(cols[-1] + _utf16_len(ch))
            return line, draw(st.sampled_from(cols))

        a, b = sorted([position(), position()])
        new = draw(
            st.one_of(
                st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12),
                st.sampled_from(["\n", "\r\n", "\r", "x.cuda()\n", "é𝔘\t", "# noqa\n"]),
            )
        )
        out.append((a, b, new))
        s, e = _offset(current, *a), _offset(current, *b)
        current = current[:s] + new + current[e:]
    return out


@FUZZ
@given(st.data())
def test_incremental_changes_match_the_lsp_rules(data: st.DataObject) -> None:
    from lsprotocol import types
    from pygls.workspace import Workspace

    from npu_lint.lsp.server import _use_lsp_lines

    text = data.draw(mutated_source())
    extra = data.draw(st.sampled_from(["", "s = 'é𝔘'\n", "\x0c\n", "a = 1\x1c\n", "b = '\u2028'\n"]))
    text = extra + text
    edits = data.draw(_edits(text))
    workspace = Workspace(None, sync_kind=types.TextDocumentSyncKind.Incremental)
    _use_lsp_lines(workspace)
    uri = "file:///fuzz/m.py"
    workspace.put_text_document(types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text))
    expected = text
    for version, ((l1, c1), (l2, c2), new) in enumerate(edits, start=2):
        change = types.TextDocumentContentChangePartial(
            range=types.Range(
                start=types.Position(line=l1, character=c1), end=types.Position(line=l2, character=c2)
            ),
            text=new,
        )
        workspace.update_text_document(
            types.VersionedTextDocumentIdentifier(uri=uri, version=version), change
        )
        s, e = _offset(expected, l1, c1), _offset(expected, l2, c2)
        expected = expected[:s] + new + expected[e:]
    assert workspace.get_text_document(uri).source == expected


# -- the server's fix-all is the CLI's fix --------------------------------------------------------------------


@settings(FUZZ, max_examples=max(8, FUZZ.max_examples // 3))
@given(mutated_source(), st.booleans())
def test_server_fix_all_equals_the_cli_fix(text: str, surrogate: bool) -> None:
    """Found by this property: a lone surrogate anywhere in an editor buffer made every fix "not parse" (the
    parser cannot encode it), so fix-all and quick fixes silently did nothing."""
    from lsprotocol import types
    from pygls.workspace import Workspace

    from npu_lint.core.source import SourceFile
    from npu_lint.engine import fix_source
    from npu_lint.lsp.server import create_server

    root, _settings, _codes, _project = _context()
    server = create_server()
    server.protocol._workspace = Workspace(None, sync_kind=types.TextDocumentSyncKind.Incremental)
    plain = text
    if surrogate:
        text = 's = "\udcff"\n' + text
    path = root / MODEL_DIR / "fuzz_case.py"
    result = server.lint(path.as_uri(), text, 1)
    fixed, _creates = server.fix_all(result, True)
    cli = fix_source(
        SourceFile.from_text(str(path), text), result.codes, result.settings, result.project, True
    )
    assert fixed == cli.text
    if surrogate:  # the surrogate changes nothing else: the same fixes as without it
        without = fix_source(
            SourceFile.from_text(str(path), plain), result.codes, result.settings, result.project, True
        )
        assert fixed == 's = "\udcff"\n' + without.text or fixed.endswith(without.text[-200:])
        event(f"surrogate buffer fixed: {fixed != text}")
