"""The result cache: per-file diagnostics keyed by tool version, settings, project index, path and content.

The cache holds findings, never fixes to apply: a fix run re-lints every file it fixes (``engine.fix``), so a
cached edit is never written anywhere. The cache is still treated as untrusted input:

* the index is signed (HMAC-SHA256) with a key kept outside the project (``$XDG_CACHE_HOME/npu-lint/key``,
  created 0600); an index that was not written by this user's npu-lint (crafted, copied, edited) is ignored;
* it is read only when it is a regular file (no symlinks), with a size cap, and each entry is checked against
  a schema before use; an invalid one is ignored and counted (``notes``), and the file is linted again.

A run reads ONE cache file: a signed index (``index-<settings fingerprint>.json``: the MAC on its first line,
the JSON payload after it) holding the whole fingerprint it was written under and, per linted file, its stat
key (size, mtime_ns, ctime_ns, inode, device), its content key and its results; the project rules' result
under the tree key; the project scan (``veomni.profile.scan_definitions``) under its files' stat keys. A file whose stat key
matches is not read at all; one whose stat changed is read and hashed, and its results reused when the content
key still matches. As in git's index, an entry is "racily clean" when the file was modified within
``RACY_NS`` of the index write: its stat key is not stored (so a later edit that keeps the size and restores
the mtime cannot hide behind it) and the next run hashes the file again.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

from npu_lint import __version__
from npu_lint.core.diagnostics import Diagnostic, is_fixer_ref

MAX_INDEX_BYTES = 128 * 1024 * 1024
RACY_NS = 2_000_000_000  # a file modified this close to the index write is hashed again next run (FAT: 2 s)
SCAN_SLOTS = (
    "scan",
    "config",
    "registry",
    "selections",
    "remaps",
    "imports",
)  # the project scans kept in the index (veomni.scanstore)
_KEY: list[bytes] = []


def _key() -> bytes:
    """This user's cache signing key (outside any project); a per-process key when it cannot be stored."""
    if _KEY:
        return _KEY[0]
    base = Path(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"))
    path = base / "npu-lint" / "key"
    key = b""
    try:
        from npu_lint.core.safeio import read_regular

        data, st = read_regular(path, limit=4096, follow_symlinks=False)
        if len(data) >= 32 and (st.st_mode & 0o077) == 0 and st.st_uid == os.getuid():
            key = data
    except (OSError, AttributeError):
        pass
    if not key:
        key = secrets.token_bytes(32)
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            tmp = path.with_name(f".key.{os.getpid()}.{secrets.token_hex(4)}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as fh:
                fh.write(key)
            os.replace(tmp, path)
        except OSError:
            pass  # not stored: this process's entries are valid only for itself
    _KEY.append(key)
    return key


_STR = str
_INT = int


def _check_edit(e: Any) -> bool:
    return (
        isinstance(e, dict)
        and isinstance(e.get("start"), _INT)
        and isinstance(e.get("end"), _INT)
        and isinstance(e.get("content"), _STR)
        and 0 <= e["start"] <= e["end"]
    )


def _check_fix(f: Any) -> bool:
    if f is None:
        return True
    return (
        isinstance(f, dict)
        and isinstance(f.get("title"), _STR)
        and f.get("applicability") in ("safe", "unsafe", "display")
        and isinstance(f.get("edits"), list)
        and all(_check_edit(e) for e in f["edits"])
        and isinstance(f.get("creates", []), list)
        and all(
            isinstance(c, dict) and isinstance(c.get("path"), _STR) and isinstance(c.get("content"), _STR)
            for c in f.get("creates", [])
        )
        and isinstance(f.get("reason", ""), _STR)
        and isinstance(f.get("deferred", False), bool)
        and (f.get("builder") is None or is_fixer_ref(f.get("builder")))
    )


def _check_diag(d: Any) -> bool:
    if not isinstance(d, dict):
        return False
    for name in ("code", "name", "message", "path"):
        if not isinstance(d.get(name), _STR):
            return False
    for name in ("line", "col", "end_line", "end_col"):
        if not isinstance(d.get(name), _INT) or isinstance(d.get(name), bool) or d[name] < 0:
            return False
    origin = d.get("origin")
    if origin is not None and not (
        isinstance(origin, dict)
        and isinstance(origin.get("path"), _STR)
        and isinstance(origin.get("line"), _INT)
    ):
        return False
    return (
        _check_fix(d.get("fix"))
        and isinstance(d.get("severity", ""), _STR)
        and isinstance(d.get("source_line", ""), _STR)
    )


def _pack(diags: list[Diagnostic]) -> dict[str, Any]:
    """An entry's results with each distinct source line stored once (``lines``; a result names its line by
    index, ``sl``): thousands of findings on one long line (a minified or generated module) stored the line once
    per finding, an index of gigabytes for a file of kilobytes, or, past ``MAX_INDEX_BYTES``, no cache at all."""
    lines: dict[str, int] = {}
    out = []
    for diag in diags:
        data = diag.to_json()
        text = data.pop("source_line")
        if text:
            data["sl"] = lines.setdefault(text, len(lines))
        out.append(data)
    return {"diags": out, "lines": list(lines)}


def _unpack(entry: dict[str, Any]) -> list[Any] | None:
    """The results of a ``_pack``ed entry with their source lines (new dicts: the index is written again as
    read); None when the entry is malformed."""
    diags, lines = entry.get("diags"), entry.get("lines", [])
    if (
        not isinstance(diags, list)
        or not isinstance(lines, list)
        or not all(isinstance(t, _STR) for t in lines)
    ):
        return None
    out = []
    for data in diags:
        if isinstance(data, dict) and "sl" in data:
            index = data["sl"]
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(lines):
                return None
            data = {k: v for k, v in data.items() if k != "sl"}
            data["source_line"] = lines[index]
        out.append(data)
    return out


class Cache:
    """Per-file results keyed by (tool version, effective config, project index, path, content hash)."""

    def __init__(
        self, directory: str, fingerprint: str, follow_symlink: bool = True, name: str | None = None
    ) -> None:
        """``name`` (default: ``fingerprint``) names the index: a front end that opens the cache before it
        knows the whole fingerprint (the project's part) names it by the settings and ``bind``s later."""
        self.root = Path(directory)
        self.name = fingerprint if name is None else name
        self._bound = name is None  # the fingerprint is whole: results stored under another are dropped
        self.directory = self.root / f"v{__version__}"
        self._ignored = False  # the root's .gitignore checked (written on the first put)
        self.fingerprint = fingerprint
        self.keys: dict[str, str] = {}  # path -> key of every file looked up in this run
        self.invalid = 0  # entries ignored because they were not valid (the front end says so)
        # the default cache directory lives in the project: a symlink there (committed, planted) would send
        # the cache's writes outside it, so it is not used
        self.disabled = not follow_symlink and os.path.islink(directory)
        self._notes = [f"{directory} is a symbolic link: the cache is not used"] if self.disabled else []
        if not self.disabled and os.path.exists(directory) and not os.path.isdir(directory):
            # a regular file (or FIFO, device) where the cache should be: left alone, and said so once
            self.disabled = True
            self._notes = [f"{directory} is not a directory: the cache is not used"]
        self._index: dict[str, dict[str, Any]] | None = None  # read once, on first use
        self._dirty = False
        self.reads = 0  # cache files read in this run (the warm path reads one)

    @property
    def notes(self) -> list[str]:
        if not self.invalid:
            return list(self._notes)
        n = self.invalid
        return [
            *self._notes,
            f"ignored {n} invalid cache entr{'ies' if n != 1 else 'y'} in {self.directory} (re-linted)",
        ]

    def tree_key(self, extra: str) -> str:
        """A key for results computed over all files looked up so far (project rules)."""
        h = hashlib.sha256(self.fingerprint.encode() + b"\0" + extra.encode("utf-8", "surrogateescape"))
        for path in sorted(self.keys):
            h.update(
                f"\0{path}\0{self.keys[path]}".encode("utf-8", "surrogateescape")
            )  # a non-UTF-8 file name
        return h.hexdigest()

    def key(self, path: str, data: bytes) -> str:
        h = hashlib.sha256()
        h.update(self.fingerprint.encode())
        h.update(b"\0")
        h.update(os.fsencode(os.path.abspath(path)))
        h.update(b"\0")
        h.update(data)
        return h.hexdigest()

    @staticmethod
    def _sign(key: str, payload: bytes) -> str:
        return hmac.new(_key(), key.encode() + b"\0" + payload, hashlib.sha256).hexdigest()

    # -- the index: one read per run --------------------------------------------------------------------------
    def index_file(self) -> Path:
        return self.directory / f"index-{hashlib.sha256(self.name.encode()).hexdigest()[:24]}.json"

    def bind(self, fingerprint: str) -> None:
        """The whole fingerprint, once known: results stored under another one are dropped (the scan kept)."""
        self.fingerprint, self._bound = fingerprint, True
        index = self._load_index()
        if index.get("fp") != fingerprint:
            index["fp"], index["files"], index["project"] = fingerprint, {}, {}

    def get_scan(self, key: str, slot: str = "scan") -> Any:
        """A value stored by ``put_scan`` under ``key`` (a project scan keyed by its files' stat keys); one
        value per ``slot`` (``SCAN_SLOTS``: the definitions scan, the ops-config fields, the registry rows, the
        NPU handle selections and remaps; ``veomni.scanstore``)."""
        entry = self._load_index().get(slot)
        return entry.get("value") if isinstance(entry, dict) and entry.get("key") == key else None

    def put_scan(self, key: str, value: Any, slot: str = "scan") -> None:
        if not self.disabled:
            self._load_index()[slot] = {"key": key, "value": value}
            self._dirty = True

    def _load_index(self) -> dict[str, dict[str, Any]]:
        if self._index is not None:
            return self._index
        from npu_lint.core.safeio import read_regular

        self._index = {
            "fp": self.fingerprint,
            "files": {},
            "project": {},
            **{slot: {} for slot in SCAN_SLOTS},
        }
        if self.disabled:
            return self._index
        try:
            self.reads += 1
            raw, _ = read_regular(self.index_file(), limit=MAX_INDEX_BYTES, follow_symlinks=False)
        except FileNotFoundError:
            return self._index
        except OSError:
            self.invalid += 1  # a symlink, a device, too large, unreadable
            return self._index
        try:
            mac, _, payload = raw.partition(b"\n")
            if not hmac.compare_digest(mac, self._sign("index:" + self.name, payload).encode()):
                raise ValueError("signature")
            data = json.loads(payload)
            files, project = data["files"], data["project"]
            scans = {slot: data.get(slot, {}) for slot in SCAN_SLOTS}
            if not all(isinstance(x, dict) for x in (files, project, *scans.values())):
                raise TypeError
            fp = data.get("fp")
            if (
                self._bound and fp != self.fingerprint
            ):  # another fingerprint's results: only the scans are kept
                fp, files, project = self.fingerprint, {}, {}
            self._index = {"fp": fp, "files": files, "project": project, **scans}
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
            self.invalid += 1
        return self._index

    @staticmethod
    def stat_key(st: os.stat_result) -> list[int]:
        return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]

    def _entry_diags(self, entry: Any) -> list[Diagnostic] | None:
        """The results of a valid index entry; None (counted) for one that fails the schema."""
        diags = _unpack(entry) if isinstance(entry, dict) else None
        if (
            not isinstance(diags, list)
            or not isinstance(entry.get("key"), _STR)
            or not all(map(_check_diag, diags))
        ):
            self.invalid += 1
            return None
        try:
            return [Diagnostic.from_json(d) for d in diags]
        except (ValueError, KeyError, TypeError, AttributeError):
            self.invalid += 1
            return None

    def _ensure_gitignore(self) -> None:
        """Keep the cache out of git (``git status``, ``audit --base``), as ruff does: a ``.gitignore`` of ``*``,
        written only in a directory npu-lint creates (``--cache-dir .`` must not hide the repository from git):
        the cache root when it did not exist, and always the versioned directory the entries live in."""
        self._ignored = True
        created_root = not os.path.lexists(self.root)
        self.root.mkdir(parents=True, exist_ok=True)
        created_dir = not os.path.lexists(self.directory)
        self._safe_dir(self.directory)
        for directory, created in ((self.root, created_root), (self.directory, created_dir)):
            if created:
                from npu_lint.engine.write import create_new

                try:
                    create_new(str(directory / ".gitignore"), "# Automatically created by npu-lint.\n*\n")
                except FileExistsError:
                    pass

    def _safe_dir(self, directory: Path) -> None:
        """Create ``directory`` (under the cache root) unless it exists; a symbolic link there, or anything
        but a directory, would send writes elsewhere: ``OSError`` (the cache is then not written)."""
        import errno
        import stat

        try:
            directory.mkdir(exist_ok=True)
        except FileExistsError:
            pass
        st = os.lstat(directory)
        if not stat.S_ISDIR(st.st_mode):
            self.disabled = True
            self._notes.append(f"{directory} is not a directory (a symbolic link?): the cache is not written")
            raise OSError(errno.ENOTDIR, "not a directory", str(directory))

    def lookup_stat(self, path: str) -> list[Diagnostic] | None:
        """The cached results of ``path`` when its stat key matches its entry (the file is not read)."""
        entry = self._load_index()["files"].get(os.path.abspath(path))
        if not isinstance(entry, dict) or entry.get("st") is None:
            return None
        try:
            st = os.stat(path)
        except OSError:
            return None
        if entry["st"] != self.stat_key(st):
            return None
        diags = self._entry_diags(entry)
        if diags is not None:
            self.keys[path] = entry["key"]
        return diags

    def lookup_content(self, path: str, key: str, st: os.stat_result) -> list[Diagnostic] | None:
        """The cached results of ``path`` when its content key (read and hashed) matches its entry; the
        entry's stat key is refreshed."""
        entry = self._load_index()["files"].get(os.path.abspath(path))
        if not isinstance(entry, dict) or entry.get("key") != key:
            return None
        diags = self._entry_diags(entry)
        if diags is not None and entry.get("st") != self.stat_key(st):
            entry["st"] = self.stat_key(st)
            self._dirty = True
        return diags

    def store(self, path: str, key: str, st: os.stat_result, diags: list[Diagnostic]) -> None:
        """Record a file's results (written by ``flush``); ``st`` is the stat of the bytes that were linted."""
        if self.disabled:
            return
        self._load_index()["files"][os.path.abspath(path)] = {
            "st": self.stat_key(st),
            "key": key,
            **_pack(diags),
        }
        self._dirty = True

    def get_project(self, key: str) -> list[Diagnostic] | None:
        entry = self._load_index()["project"].get(key)
        return None if entry is None else self._entry_diags(entry)

    def put_project(self, key: str, diags: list[Diagnostic]) -> None:
        if self.disabled:
            return
        self._load_index()["project"] = {key: {"key": key, **_pack(diags)}}
        self._dirty = True

    def flush(self) -> None:
        """Write the index when it changed: signed, atomically. Entries of files modified within ``RACY_NS``
        of now lose their stat key (racily clean: hashed again next run); entries of deleted files are dropped."""
        if self.disabled or not self._dirty or self._index is None:
            return
        self._dirty = False
        files = self._index["files"]
        for gone in [p for p in files if not os.path.lexists(p)]:  # bounded: deleted files leave the index
            del files[gone]
        now = time.time_ns()
        for entry in files.values():
            st = entry.get("st") if isinstance(entry, dict) else None
            if isinstance(st, list) and len(st) == 5 and max(st[1], st[2]) >= now - RACY_NS:
                entry["st"] = None
        payload = json.dumps(self._index, separators=(",", ":")).encode()
        data = self._sign("index:" + self.name, payload).encode() + b"\n" + payload
        if len(data) > MAX_INDEX_BYTES:
            return
        self._write(self.index_file(), data)

    def _write(self, target: Path, data: bytes) -> None:
        try:
            if not self._ignored:
                self._ensure_gitignore()
            self._safe_dir(self.directory)
            self._safe_dir(target.parent)
            tmp = target.parent / f".{target.stem[:16]}.npu-lint-{os.getpid()}.{secrets.token_hex(4)}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                os.replace(tmp, target)
            except BaseException:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                raise
        except OSError:
            pass  # a cache that cannot be written is not an error
