"""The one reader: every file npu-lint opens is read here. Only regular files, with a bound, never blocking.

A FIFO or a device named ``*.py`` (or a symlink to ``/dev/zero``) must not hang or exhaust npu-lint: the path
is opened with ``O_NONBLOCK`` (so a FIFO without a writer does not block), checked with ``fstat`` on the open
descriptor (no window between the check and the read), and read up to a size cap. ``read_text``,
``read_json`` and ``read_toml`` decode on top of it (one-line ``OSError`` / ``ValueError``); ``read_stream``
bounds standard input. ``tests/test_layout.py`` forbids ``open()``, ``read_text()``, ``read_bytes()``,
``json.load`` and ``tomllib.load`` anywhere else in ``npu_lint/``.
"""

from __future__ import annotations

import errno
import os
import stat

MAX_SOURCE_BYTES = 64 * 1024 * 1024  # a linted source file
MAX_SMALL_BYTES = 8 * 1024 * 1024  # configuration, baselines, pyproject files, requests
_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)


def read_regular(
    path: str | os.PathLike[str], limit: int = MAX_SOURCE_BYTES, follow_symlinks: bool = True
) -> tuple[bytes, os.stat_result]:
    """The bytes of a regular file and its ``stat`` (taken on the open descriptor). Raises ``OSError`` with a
    one-line ``strerror`` for anything else (a FIFO, a device, a directory, a file larger than ``limit``)."""
    flags = _FLAGS if follow_symlinks else _FLAGS | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_symlinks:
            raise OSError(errno.ELOOP, "is a symbolic link (not followed)", str(path)) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        if st.st_size > limit:
            raise OSError(errno.EFBIG, f"larger than {limit} bytes", str(path))
        chunks = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:
            raise OSError(errno.EFBIG, f"larger than {limit} bytes", str(path))
        return data, st
    finally:
        os.close(fd)


def read_text(
    path: str | os.PathLike[str],
    limit: int = MAX_SOURCE_BYTES,
    encoding: str = "utf-8",
    errors: str = "strict",
    follow_symlinks: bool = True,
) -> str:
    """The text of a regular file (``read_regular``, then decoded). ``UnicodeDecodeError`` is a ``ValueError``."""
    data, _ = read_regular(path, limit=limit, follow_symlinks=follow_symlinks)
    return data.decode(encoding, errors)


def read_stream(stream: object, limit: int = MAX_SOURCE_BYTES) -> bytes:
    """At most ``limit`` bytes of a binary stream (standard input); ``OSError(EFBIG)`` beyond that."""
    data = stream.read(limit + 1)  # type: ignore[attr-defined]
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit} bytes", "<stdin>")
    return data


def parse_json(data: str | bytes) -> object:
    """``json.loads`` whose every failure is a one-line ``ValueError`` (malformed, not UTF-8, nested too deeply)."""
    import json

    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8: {exc.reason}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"line {exc.lineno} column {exc.colno}: {exc.msg}") from None


def read_json(path: str | os.PathLike[str], limit: int = MAX_SMALL_BYTES) -> object:
    """A JSON file: ``OSError`` when it cannot be read (``read_regular``), ``ValueError`` when it is not JSON."""
    data, _ = read_regular(path, limit=limit)
    return parse_json(data)


def read_toml(path: str | os.PathLike[str], limit: int = MAX_SMALL_BYTES) -> dict:
    """A TOML file: ``OSError`` when it cannot be read, ``ValueError`` when it is not (UTF-8) TOML."""
    import tomllib

    data, _ = read_regular(path, limit=limit)
    try:
        return tomllib.loads(data.decode("utf-8"))
    except (RecursionError, MemoryError):
        raise ValueError("nested too deeply") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8: {exc.reason}") from None
