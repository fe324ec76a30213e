"""The project scans' store: results of whole-tree reads (the definitions scan, the ops-config fields, the
registry rows, the import sites, the NPU handle selections) kept in the run's cache index and reused while no
file they read changed its stat key (size, mtime, ctime, inode). The front end hands the index in
(``use_store``; the language server keeps a ``MemoryStore``); without one every scan reads its files. A file modified within the racy window (its mtime
granularity) makes the result not stored: it is read again next run.

``list_tree(root)``: the one listing of a tree's ``veomni/**/*.py`` that ``load_project`` makes and hands to
every whole-tree scan; each scan selects its files from it (``TreeListing.select``) with its own skipped
directory names, in the order a sorted ``os.walk`` of its own would give."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

RACY_NS = 2_000_000_000  # a file modified this recently may change again unseen within its mtime granularity
_STORE: list[Any] = []  # the run's cache index (``get_scan``/``put_scan``), when the front end has one

T = TypeVar("T")


def use_store(store: Any) -> None:
    """Keep the scans' results in ``store`` (an object with ``get_scan(key, slot)`` and
    ``put_scan(key, value, slot)``: the cache index); None: no store."""
    _STORE[:] = [store] if store is not None else []


def current() -> Any:
    """The store in use, or None."""
    return _STORE[0] if _STORE else None


class MemoryStore:
    """A store for a long-lived process (the language server): the scans' results kept in memory, so reloading
    a project re-reads only what changed; the oldest of more than ``limit`` results is dropped."""

    def __init__(self, limit: int = 64) -> None:
        self.limit = limit
        self._slots: dict[tuple[str, str], Any] = {}

    def get_scan(self, key: str, slot: str) -> Any:
        return self._slots.get((key, slot))

    def put_scan(self, key: str, value: Any, slot: str) -> None:
        self._slots.pop((key, slot), None)
        self._slots[(key, slot)] = value
        while len(self._slots) > self.limit:
            del self._slots[next(iter(self._slots))]


@dataclass(frozen=True)
class TreeListing:
    """Every ``.py`` file under a tree's ``veomni/`` (dot directories and ``__pycache__`` left out), in sorted
    ``os.walk`` order, each with its directory's parts below ``veomni/``."""

    root: Path
    files: tuple[tuple[Path, tuple[str, ...]], ...]

    def select(self, skip: Collection[str], under: tuple[str, ...] = ()) -> list[Path]:
        """The files below ``veomni/<under...>`` none of whose directories (below ``veomni/``) is named in
        ``skip``: what ``os.walk`` of that directory pruning ``skip`` would list, in the same order."""
        n = len(under)
        return [
            path
            for path, parts in self.files
            if parts[:n] == under and not any(part in skip for part in parts)
        ]


def list_tree(root: Path) -> TreeListing:
    """The one walk of ``root/veomni`` (see :class:`TreeListing`)."""
    base = root / "veomni"
    out: list[tuple[Path, tuple[str, ...]]] = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
        here = Path(dirpath)
        parts = here.relative_to(base).parts
        out.extend((here / name, parts) for name in sorted(filenames) if name.endswith(".py"))
    return TreeListing(root, tuple(out))


def stat_key(root: Path, files: list[Path]) -> tuple[str, int]:
    """A key over the stat keys (size, mtime, ctime, inode) of ``files``, and the newest of their times."""
    h = hashlib.sha256(str(root).encode("utf-8", "surrogateescape"))  # non-UTF-8 names: byte-exact
    newest = 0
    for path in files:
        try:
            st = os.stat(path)
        except OSError:
            h.update(f"\0{path}:-".encode("utf-8", "surrogateescape"))
            continue
        newest = max(newest, st.st_mtime_ns, st.st_ctime_ns)
        h.update(
            f"\0{path}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino}".encode(
                "utf-8", "surrogateescape"
            )
        )
    return h.hexdigest(), newest


def string_rows(hit: Any, width: int) -> tuple[tuple[str, ...], ...] | None:
    """A stored list of rows of ``width`` strings, as tuples; None for a value of another shape."""
    if not isinstance(hit, list) or not all(
        isinstance(r, list) and len(r) == width and all(isinstance(x, str) for x in r) for r in hit
    ):
        return None
    return tuple(tuple(r) for r in hit)


def stored(
    slot: str,
    root: Path,
    files: list[Path],
    compute: Callable[[], T],
    encode: Callable[[T], Any],
    decode: Callable[[Any], T | None],
) -> T:
    """``compute()``, or the value stored under ``slot`` for the same stat keys of ``files`` (``decode``
    returns None for a value of the wrong shape: computed again). ``encode`` makes the value JSON-ready."""
    store = current()
    if store is None:
        return compute()
    key, newest = stat_key(root, files)
    hit = store.get_scan(key, slot)
    if hit is not None:
        try:
            value = decode(hit)
        except (TypeError, ValueError, KeyError, IndexError, AttributeError):
            value = None
        if value is not None:
            return value
    value = compute()
    if newest < time.time_ns() - RACY_NS:  # racily clean: not stored
        store.put_scan(key, encode(value), slot)
    return value
