"""Writes that lose nothing: atomic, keeping encoding (BOM included) and mode, and only over what was read.

* ``write_atomic`` writes a temporary file beside the target and renames it over the target, but only if the
  target still has the content the fix was computed on (size, mtime and hash checked just before the rename);
  otherwise it raises ``ConcurrentChange`` and writes nothing (a concurrent save wins).
* A symbolic link is written through (its target is replaced, the link stays); a file with several hard
  links is rewritten in place so every link keeps seeing it.
* Temporary files are named ``.<name>.npu-lint-<pid>.<random>.tmp``: a run that writes (``--fix``,
  ``--add-noqa``) removes those whose process is gone and whose ``<name>`` is beside them
  (``remove_stale_temps``; a read-only run deletes nothing), and a run stopped by SIGINT/SIGTERM removes its own.
* A read-only file (no write bit, or not writable by this user) is refused, never replaced by the rename.
* ``output_refusal``: a report (``-o``, a baseline) never replaces a source, a project file or an input.
* ``write_output`` (``-o FILE``) never replaces a device, a FIFO or a symlink: they are written in place; a FIFO
  nobody opens for reading within ``FIFO_READER_WAIT`` seconds is an error (ENXIO), never an endless wait.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
import stat
import time
from pathlib import Path

TEMP_PATTERN = re.compile(r"^\.(?P<stem>.*)\.npu-lint-(\d+)\.[0-9a-f]{8}\.tmp$")
_NAME_ROOM = 80  # characters of the target's name kept in a temporary name (NAME_MAX is 255 bytes)


# never copied into the staging tree: VCS data, caches, virtual environments, checkpoints
STAGING_IGNORED = (
    ".git",
    ".hg",
    ".venv",
    "venv",
    "node_modules",
    "__pycache__",
    ".npu_lint_cache",
    ".ruff_cache",
    ".pytest_cache",
    ".mypy_cache",
    "*.safetensors",
    "*.bin",
    "*.pt",
    "*.pth",
    "*.ckpt",
)
_STAGING_PATTERNS = shutil.ignore_patterns(*STAGING_IGNORED)


def staging_ignore(directory: str, names: list[str]) -> set[str]:
    """``shutil.copytree``'s ``ignore`` for a staging copy: the ``STAGING_IGNORED`` patterns, and every entry that
    is neither a regular file, a directory nor a symbolic link (a FIFO, a socket or a device: a training job's
    named pipe beside the code must not stop ``--diff`` or ``migrate``; copying one fails or blocks)."""
    skipped = set(_STAGING_PATTERNS(directory, names))
    for name in names:
        if name in skipped:
            continue
        try:
            mode = os.lstat(os.path.join(directory, name)).st_mode
        except OSError:
            continue  # gone meanwhile: copytree reports it as before
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
            skipped.add(name)
    return skipped


def copy_writable(src: str, dst: str) -> str:
    """``shutil.copy2`` with the owner's write bit set on the copy (a read-only source tree staged for fixing;
    the tests and benchmarks copy the read-only corpora with it too)."""
    out = shutil.copy2(src, dst)
    os.chmod(dst, os.stat(dst).st_mode | stat.S_IWUSR)
    return out


class ConcurrentChange(Exception):
    """The file changed between the read a fix was computed on and the write: nothing was written."""


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _temp_name(target: Path) -> Path:
    stem = target.name
    while len(stem.encode("utf-8", "surrogateescape")) > _NAME_ROOM:
        stem = stem[:-1]
    return target.parent / f".{stem}.npu-lint-{os.getpid()}.{secrets.token_hex(4)}.tmp"


def _check_unchanged(path: Path, expect: tuple[bytes, os.stat_result] | None) -> None:
    if expect is None:
        return
    data, before = expect
    from npu_lint.core.safeio import read_regular

    try:
        now_data, now = read_regular(path, limit=max(len(data), 1) * 2 + 4096)
    except OSError as exc:
        raise ConcurrentChange(
            f"{path}: changed while being fixed ({exc.strerror or exc}); not written"
        ) from None
    if (
        now.st_size != before.st_size
        or now.st_mtime_ns != before.st_mtime_ns
        or now.st_ino != before.st_ino
        or now_data != data
    ):
        raise ConcurrentChange(f"{path}: changed while being fixed (a concurrent write won); not written")


def write_atomic(
    path: str, text: str, encoding: str, expect: tuple[bytes, os.stat_result] | None = None
) -> None:
    """Write ``text`` to ``path`` keeping the encoding (BOM included) and the file mode.

    ``expect`` is the (bytes, stat) of the read the text was computed from: the write happens only if the file
    still matches it (else ``ConcurrentChange``). A symlink is written through, a multiply linked file in
    place; anything but a regular file (or a missing one) is refused with ``OSError``."""
    target = Path(path)
    if target.is_symlink():
        target = Path(os.path.realpath(target))  # written through: the link stays a link
    data = text.encode(encoding)
    try:
        st = target.lstat()
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        import errno

        raise OSError(errno.EINVAL, "not a regular file", str(path))
    if st is None and expect is not None:
        raise ConcurrentChange(f"{path}: deleted while being fixed; not written")
    if st is not None and (not st.st_mode & 0o222 or not os.access(target, os.W_OK)):
        import errno  # as ruff: a file the user made read-only is not replaced behind their back

        raise OSError(errno.EACCES, "read-only file (not written; make it writable to fix it)", str(path))
    mode = st.st_mode & 0o7777 if st is not None else 0o644
    if st is not None and st.st_nlink > 1:
        _check_unchanged(target, expect)
        _write_in_place(target, data)  # keeps every hard link pointing at the fixed file
        return
    tmp = _temp_name(target)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
            made = os.fstat(fh.fileno())
        if st is not None and (made.st_uid, made.st_gid) != (st.st_uid, st.st_gid):
            # the replacement would belong to whoever runs npu-lint (root in a container, a teammate with
            # group write access): it gets the original's owner and group, or the file is written in place
            try:
                os.chown(tmp, st.st_uid, st.st_gid)
            except OSError:
                os.unlink(tmp)
                _check_unchanged(target, expect)
                _write_in_place(target, data)
                return
        os.chmod(tmp, mode)
        _check_unchanged(target, expect)
        os.replace(tmp, target)
    except BaseException:  # KeyboardInterrupt / SystemExit (SIGTERM) included: no leftovers
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def create_new(path: str, text: str, encoding: str = "utf-8") -> None:
    """Create ``path`` with ``text`` atomically, never replacing anything: a file (or link) that appears there
    meanwhile wins (``FileExistsError``). The content is written to a temporary file and hard-linked into place
    (``link`` fails when the name exists), so the new file is never seen half-written."""
    target = Path(path)
    tmp = _temp_name(target)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(text.encode(encoding))
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644 & ~_umask())
        try:
            os.link(tmp, target)
        except OSError as exc:
            if isinstance(exc, FileExistsError):
                raise
            # no hard links on this file system: exclusive create, then write
            with open(target, "xb") as fh:
                fh.write(text.encode(encoding))
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _write_in_place(target: Path, data: bytes) -> None:
    fd = os.open(target, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def _has_target(path: str, stem: str) -> bool:
    """Whether the file a temporary name was made for exists beside it (``_temp_name`` keeps at most
    ``_NAME_ROOM`` bytes of the name: a longer name only has to start with the stem)."""
    directory = os.path.dirname(path) or "."
    if os.path.lexists(os.path.join(directory, stem)):
        return True
    if len(stem.encode("utf-8", "surrogateescape")) < _NAME_ROOM - 4:
        return False
    try:
        return any(n.startswith(stem) and not TEMP_PATTERN.match(n) for n in os.listdir(directory))
    except OSError:
        return False


def remove_stale_temps(paths: list[str]) -> list[str]:
    """Remove npu-lint's own temporary files (``TEMP_PATTERN``) left by a process that is gone; returns them."""
    removed = []
    for path in paths:
        match = TEMP_PATTERN.match(os.path.basename(path))
        if match is None:
            continue
        try:
            st = os.lstat(path)
            # the owner is gone, or the pid was reused long after (a write takes seconds, not a day)
            gone = not _pid_alive(int(match.group(2))) or time.time() - st.st_mtime > 86400
            if not _has_target(path, match.group("stem")):
                continue  # not beside the file it would replace: not ours to delete
            if gone and stat.S_ISREG(st.st_mode):
                os.unlink(path)
                removed.append(path)
        except OSError:
            continue
    return removed


_PROTECTED_NAMES = ("pyproject.toml", "npu-lint.toml", "setup.cfg", "setup.py", ".gitignore", "__init__.py")


def output_refusal(path: str, protected: list[str] | tuple[str, ...] = ()) -> str:
    """Why a report must not be written to ``path`` ("" when it may): a Python source or project file, even
    a new one (``-o m.py`` is a slip that would replace the source with a report), or one of ``protected`` (the
    files being linted, the baseline, the configuration in use), symlinks and hard links resolved."""
    name = os.path.basename(os.path.realpath(path))
    source = name.endswith((".py", ".pyi")) or name in _PROTECTED_NAMES
    if not os.path.lexists(path):  # a new pyproject.toml holding a report would break every later run
        return "names a source or project file" if source else ""
    if source:
        return "is a source or project file"
    try:
        target = os.stat(path)
    except OSError:
        return ""
    if stat.S_ISREG(target.st_mode) and target.st_nlink > 1:
        # a hard link: the report would be written in place, into every name of the file (a source, maybe)
        return "has other hard links (a report written there would replace every linked file)"
    for other in protected:  # by identity: another name, a symlink or a hard link of an input is the input
        if not other:
            continue
        try:
            st = os.stat(other)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino):
            return "is one of the files this run reads"
    return ""


FIFO_READER_WAIT = 5.0  # seconds `-o FIFO` waits for a reader to open it


def write_output(path: str, text: str) -> None:
    """``-o FILE``: a regular file (or a new one) is written atomically; a device, FIFO or symlink is written
    in place, never replaced. Raises ``OSError`` (one-line ``strerror``) when that cannot be done."""
    import errno

    target = Path(path)
    data = text.encode("utf-8")
    try:
        st = target.lstat()
    except FileNotFoundError:
        st = None
    if st is None:
        if not target.parent.is_dir():
            raise OSError(errno.ENOENT, "no such directory", str(target.parent))
        write_atomic(path, text, "utf-8")
        return
    if stat.S_ISDIR(st.st_mode):
        raise OSError(errno.EISDIR, "is a directory", path)
    try:
        real = os.stat(path)
    except OSError:
        real = None
    if real is not None and stat.S_ISREG(real.st_mode) and real.st_nlink == 1:
        write_atomic(path, text, "utf-8")  # a symlink to a regular file is written through
        return
    # a symlink (/dev/stdout), a device (/dev/null), a FIFO, a hard-linked file: write in place
    # never blocks on a FIFO nobody reads: opened non-blocking (ENXIO while no reader), retried for
    # FIFO_READER_WAIT seconds (a reader started just before npu-lint may not have opened it yet), then an
    # error; blocking again once open, so a slow reader gets every byte
    flags = os.O_WRONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    deadline = time.monotonic() + FIFO_READER_WAIT
    while True:
        try:
            fd = os.open(path, flags)
            break
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise
            if time.monotonic() >= deadline:
                raise OSError(
                    errno.ENXIO, f"a FIFO with no reader (waited {FIFO_READER_WAIT:g} s for one)", path
                ) from None
            time.sleep(0.02)
    try:
        os.set_blocking(fd, True)
        if stat.S_ISREG(os.fstat(fd).st_mode):
            os.ftruncate(fd, 0)
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
    finally:
        os.close(fd)
