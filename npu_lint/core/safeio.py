"""Reading files that may be anything: only regular files are read, with a bound, never blocking.

A FIFO or a device named ``*.py`` (or a symlink to ``/dev/zero``) must not hang or exhaust npu-lint: the path
is opened with ``O_NONBLOCK`` (so a FIFO without a writer does not block), checked with ``fstat`` on the open
descriptor (no window between the check and the read), and read up to a size cap.
"""

from __future__ import annotations

import errno
import os
import stat

MAX_SOURCE_BYTES = 64 * 1024 * 1024  # a linted source file
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


def is_regular(path: str | os.PathLike[str], follow_symlinks: bool = True) -> bool:
    try:
        st = os.stat(path) if follow_symlinks else os.lstat(path)
    except (OSError, ValueError):
        return False
    return stat.S_ISREG(st.st_mode)
