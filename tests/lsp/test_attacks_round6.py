"""Round-6 adversarial findings on the language server (bench/accuracy/adversary-round6.md): a raw JSON-RPC
client over the server's stdio, as a careless client would talk to it."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from tests.lsp.helpers import server_env


def _send(proc: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    body = json.dumps(message).encode()
    assert proc.stdin is not None
    proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    proc.stdin.flush()


def _read(proc: subprocess.Popen[bytes]) -> dict[str, Any]:
    assert proc.stdout is not None
    length = 0
    while True:
        line = proc.stdout.readline()
        assert line, "the server closed its output"
        if line in (b"\r\n", b"\n"):
            break
        name, _, value = line.decode().partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    return json.loads(proc.stdout.read(length))


def _until(proc: subprocess.Popen[bytes], wanted: Any, timeout: float = 60.0) -> dict[str, Any]:
    """The first message ``wanted(message)`` accepts; an empty dict when none comes within ``timeout``."""
    found: dict[str, Any] = {}

    def wait() -> None:
        while True:
            message = _read(proc)
            if wanted(message):
                found.update(message)
                return

    reader = threading.Thread(target=wait, daemon=True)
    reader.start()
    reader.join(timeout)
    return found


def _response(proc: subprocess.Popen[bytes], msg_id: int, timeout: float = 60.0) -> dict[str, Any]:
    return _until(proc, lambda m: m.get("id") == msg_id and "method" not in m, timeout)


def _server(cwd: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "npu_lint", "server"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=cwd,
        env=server_env(),
    )
    params = {"processId": None, "rootUri": cwd.as_uri(), "capabilities": {}}
    _send(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params})
    assert "result" in _response(proc, 1)
    _send(proc, {"jsonrpc": "2.0", "method": "initialized", "params": {}})
    return proc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_requests_after_shutdown_are_answered(tmp_path: Path) -> None:
    """A6-31: a request sent after `shutdown` (a client closing while a code action is still wanted) got no
    response at all (pygls drops it with a log line): the client waits for it until it gives up. The LSP
    specification's answer is an InvalidRequest error."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "npu_lint", "server"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=tmp_path,
        env=server_env(),
    )
    try:
        root = tmp_path.as_uri()
        _send(
            proc,
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {"processId": None, "rootUri": root, "capabilities": {}},
            },
        )
        assert "result" in _response(proc, 1)
        _send(proc, {"jsonrpc": "2.0", "method": "initialized", "params": {}})
        _send(proc, {"jsonrpc": "2.0", "id": 2, "method": "shutdown"})
        assert _response(proc, 2).get("result", "missing") is None
        where = {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}}
        params = {"textDocument": {"uri": f"{root}/m.py"}, "range": where, "context": {"diagnostics": []}}
        _send(proc, {"jsonrpc": "2.0", "id": 3, "method": "textDocument/codeAction", "params": params})
        answer = _response(proc, 3, timeout=15)
        assert answer.get("error", {}).get("code") == -32600, answer
        _send(proc, {"jsonrpc": "2.0", "method": "exit"})
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_document_whose_uri_is_percent_encoded_is_found_again(tmp_path: Path) -> None:
    """A6-33: pygls files open documents under the percent-decoded URI; the server looked them up by the
    client's spelling. A file in a directory with a space (`file:///a%20b/m.py`, what VS Code sends) or with
    a non-ASCII name got diagnostics once, on didOpen, and then never again: edits were not linted, and
    code actions, pull diagnostics and fix-all answered nothing."""
    folder = tmp_path / "my models"
    folder.mkdir()
    proc = _server(tmp_path)
    try:
        uri = (folder / "m\u00e9.py").as_uri()
        assert "%20" in uri
        text = "import torch\n\n\ndef f(x):\n    return x\n"
        item = {"uri": uri, "languageId": "python", "version": 1, "text": text}
        _send(proc, {"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": item}})

        def diagnostics(count: int) -> Any:
            return lambda m: (
                m.get("method") == "textDocument/publishDiagnostics"
                and m["params"]["uri"] == uri
                and len(m["params"]["diagnostics"]) == count
            )

        assert _until(proc, diagnostics(0))
        change = {"text": text.replace("return x", "return x.cuda()")}
        params = {"textDocument": {"uri": uri, "version": 2}, "contentChanges": [change]}
        _send(proc, {"jsonrpc": "2.0", "method": "textDocument/didChange", "params": params})
        assert _until(proc, diagnostics(1), timeout=30), "the edit was never linted"
        where = {"start": {"line": 4, "character": 0}, "end": {"line": 4, "character": 20}}
        params = {"textDocument": {"uri": uri}, "range": where, "context": {"diagnostics": []}}
        _send(proc, {"jsonrpc": "2.0", "id": 2, "method": "textDocument/codeAction", "params": params})
        titles = [a["title"] for a in _response(proc, 2).get("result") or []]
        assert any("NPU101" in t for t in titles), titles
    finally:
        _stop(proc)
