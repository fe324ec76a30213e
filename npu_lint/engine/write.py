"""Atomic writes that keep the encoding (BOM included) and the file mode."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: str, text: str, encoding: str) -> None:
    """Write ``text`` to ``path`` atomically, keeping the encoding (BOM included) and the file mode."""
    target = Path(path)
    data = text.encode(encoding)
    try:
        mode = target.stat().st_mode & 0o7777
    except OSError:
        mode = 0o644
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
