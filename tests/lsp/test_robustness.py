"""The server survives hostile input: a wrong Content-Length, odd URIs, FIFOs and devices as documents."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

BAD = "import torch\n\n\ndef f(model):\n    return model.cuda()\n"
RAW = Path(__file__).resolve().parents[2] / "bench" / "lsp_raw.py"


def _raw():  # noqa: ANN202
    spec = importlib.util.spec_from_file_location("lsp_raw", RAW)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


@pytest.fixture
def client(tmp_path: Path):  # noqa: ANN201
    (tmp_path / "npu-lint.toml").write_text("")
    c = _raw().RawClient(tmp_path)
    c.initialize()
    yield c
    c.close()


@pytest.mark.parametrize("delta", [3, -3, 40])
def test_recovers_from_a_wrong_content_length(client, tmp_path: Path, delta: int) -> None:  # noqa: ANN001
    client.open((tmp_path / "first.py").as_uri(), BAD, delta=delta)
    second = (tmp_path / "second.py").as_uri()
    client.open(second, BAD)
    if delta > 10:  # the first frame waits for bytes: the second message completes it
        client.open(second, BAD)
    assert any(d["code"] == "NPU101" for d in client.diagnostics_for(second))


def test_odd_uris_get_diagnostics(client, tmp_path: Path) -> None:  # noqa: ANN001
    for uri in (
        tmp_path.as_uri() + "/a%00b.py",
        "untitled:Untitled-1.py",
        tmp_path.as_uri() + "/%E2%82%AC.py",
    ):
        client.open(uri, BAD)
        assert any(d["code"] == "NPU101" for d in client.diagnostics_for(uri)), uri


def test_fifo_and_device_documents_do_not_hang(tmp_path: Path) -> None:
    (tmp_path / "npu-lint.toml").write_text("")
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    client = _raw().RawClient(tmp_path)
    client.initialize({"textDocument": {"diagnostic": {"dynamicRegistration": False}}})  # pull diagnostics
    try:
        for uri in (fifo.as_uri(), "file:///dev/zero"):
            client.open(uri, BAD)
            opened = client.request("textDocument/diagnostic", {"textDocument": {"uri": uri}})
            assert opened["result"]["items"]
            client.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
            # not open any more: the server reads it from disk, which it does only for regular files
            closed = client.request("textDocument/diagnostic", {"textDocument": {"uri": uri}}, timeout=30)
            assert "result" in closed or "error" in closed
    finally:
        client.close()


def test_notifications_leave_no_futures_behind(tmp_path: Path) -> None:
    """pygls keeps the future of every notification handled by a generator (didOpen/didChange) forever; the
    server drops them (memory flat under edits: bench/lsp_memory.py measures RSS over 15,000 edits)."""
    import asyncio
    import json

    from npu_lint.lsp.server import create_server

    server = create_server()

    class Sink:
        def write(self, data: bytes) -> None:
            pass

        def close(self) -> None:
            pass

    server.protocol.set_writer(Sink())
    (tmp_path / "npu-lint.toml").write_text("")
    uri = (tmp_path / "m.py").as_uri()

    def send(payload: dict) -> None:
        message = json.loads(json.dumps(payload), object_hook=server.protocol.structure_message)
        server.protocol.handle_message(message)

    async def main() -> int:
        send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {"processId": None, "rootUri": tmp_path.as_uri(), "capabilities": {}},
            }
        )
        await asyncio.sleep(0.05)
        send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        doc = {"uri": uri, "languageId": "python", "version": 1, "text": BAD}
        send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": doc}})
        for version in range(2, 502):
            change = {"range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}}}
            change["text"] = "" if version % 2 else " "
            params = {"textDocument": {"uri": uri, "version": version}, "contentChanges": [change]}
            send({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": params})
            await asyncio.sleep(0)
        await asyncio.sleep(0.2)
        return len(server.protocol._request_futures)

    assert asyncio.run(main()) <= 2
