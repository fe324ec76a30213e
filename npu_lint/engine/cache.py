"""The result cache: per-file diagnostics keyed by tool version, settings, project index, path and content."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

from npu_lint import __version__
from npu_lint.core.diagnostics import Diagnostic


class Cache:
    """Per-file results keyed by (tool version, effective config, project index, path, content hash)."""

    def __init__(self, directory: str, fingerprint: str) -> None:
        self.root = Path(directory)
        self.directory = self.root / f"v{__version__}"
        self._ignored = False  # the root's .gitignore checked (written on the first put)
        self.fingerprint = fingerprint
        self.keys: dict[str, str] = {}  # path -> key of every file looked up in this run

    def tree_key(self, extra: str) -> str:
        """A key for results computed over all files looked up so far (project rules)."""
        h = hashlib.sha256(self.fingerprint.encode() + b"\0" + extra.encode())
        for path in sorted(self.keys):
            h.update(f"\0{path}\0{self.keys[path]}".encode())
        return h.hexdigest()

    def key(self, path: str, data: bytes) -> str:
        h = hashlib.sha256()
        h.update(self.fingerprint.encode())
        h.update(b"\0")
        h.update(os.path.abspath(path).encode())
        h.update(b"\0")
        h.update(data)
        return h.hexdigest()

    def _file(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> list[Diagnostic] | None:
        try:
            raw = self._file(key).read_bytes()
        except OSError:
            return None
        try:
            return [Diagnostic.from_json(d) for d in json.loads(raw)]
        except (ValueError, KeyError, TypeError):
            return None

    def _ensure_gitignore(self) -> None:
        """Keep the cache out of git (``git status``, ``audit --base``), as ruff does: a ``.gitignore`` of ``*``."""
        self._ignored = True
        marker = self.root / ".gitignore"
        if not marker.exists():
            self.root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".tmp-")
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write("# Automatically created by npu-lint.\n*\n")
            os.replace(tmp, marker)

    def put(self, key: str, diags: list[Diagnostic]) -> None:
        target = self._file(key)
        try:
            if not self._ignored:
                self._ensure_gitignore()
            target.parent.mkdir(parents=True, exist_ok=True)
            data = json.dumps([d.to_json() for d in diags], separators=(",", ":")).encode()
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, target)
        except OSError:
            pass  # a cache that cannot be written is not an error
