"""A raw JSON-RPC client for the language server over stdio (no client library): it can send malformed
frames (a wrong Content-Length) and measure the server process (RSS). Used by bench/lsp_memory.py,
bench/robustness.py and tests/lsp/test_robustness.py."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


class RawClient:
    def __init__(self, root: Path) -> None:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "npu_lint", "server"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=root,
            env=env,
        )
        self.root = root
        self.messages: queue.Queue[dict[str, Any]] = queue.Queue()
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        out = self.proc.stdout
        assert out is not None
        while True:
            length = 0
            while True:
                line = out.readline()
                if not line:
                    return
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
                if line in (b"\r\n", b"\n"):
                    break
            self.messages.put(json.loads(out.read(length)))

    def frame(self, payload: dict[str, Any], delta: int = 0) -> bytes:
        body = json.dumps(payload).encode()
        return f"Content-Length: {len(body) + delta}\r\n\r\n".encode() + body

    def send_bytes(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def notify(self, method: str, params: dict[str, Any], delta: int = 0) -> None:
        self.send_bytes(self.frame({"jsonrpc": "2.0", "method": method, "params": params}, delta))

    def request(self, method: str, params: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
        self.next_id += 1
        ident = self.next_id
        self.send_bytes(self.frame({"jsonrpc": "2.0", "id": ident, "method": method, "params": params}))
        return self.wait(lambda m: m.get("id") == ident and "method" not in m, timeout)

    def wait(self, predicate: Any, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no matching message")
            try:
                message = self.messages.get(timeout=left)
            except queue.Empty:
                raise TimeoutError("no matching message") from None
            if message.get("method") in ("client/registerCapability", "workspace/configuration"):
                if "id" in message:  # answer the server's requests
                    result = None if message["method"] == "client/registerCapability" else [{}]
                    self.send_bytes(self.frame({"jsonrpc": "2.0", "id": message["id"], "result": result}))
                continue
            if predicate(message):
                return message

    def diagnostics_for(self, uri: str, timeout: float = 30) -> list[dict[str, Any]]:
        msg = self.wait(
            lambda m: m.get("method") == "textDocument/publishDiagnostics" and m["params"]["uri"] == uri,
            timeout,
        )
        return msg["params"]["diagnostics"]

    def initialize(self, capabilities: dict[str, Any] | None = None) -> None:
        self.request(
            "initialize",
            {
                "processId": os.getpid(),
                "rootUri": self.root.as_uri(),
                "capabilities": capabilities or {},
                "initializationOptions": {"settings": {"lint": {"debounce": 0}}},
            },
        )
        self.notify("initialized", {})

    def open(self, uri: str, text: str, delta: int = 0) -> None:
        self.notify(
            "textDocument/didOpen",
            {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}},
            delta,
        )

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def close(self) -> None:
        try:
            self.request("shutdown", {}, timeout=10)
            self.notify("exit", {})
            self.proc.wait(10)
        except (TimeoutError, OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
