"""Long work off the language server's event loop: a fix-all runs in a child forked from the server.

A fix-all over thousands of findings takes seconds of CPU (20 000 ``.cuda()`` fixes in one buffer: about 10 s
unloaded); run on the event loop it blocked every other request, ``shutdown`` included (adversary round 3,
A40). A thread would not do: the engine keeps per-process memos that two threads linting at once could mix up.
So on POSIX the work runs in a child forked from the server: it inherits the project index, the rule registry
and the buffer (nothing to send), has its standard streams on ``/dev/null`` (it can never write into the
protocol), dies with the server (``PR_SET_PDEATHSIG`` on Linux) and sends its result back pickled on a pipe
that the event loop watches; the server keeps answering meanwhile. A cancelled request (``$/cancelRequest``,
shutdown) kills its child. At most ``MAX_CHILDREN`` run at once; more wait for a slot. Without ``os.fork`` the
work runs inline, as before.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
import sys
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

MAX_CHILDREN = 2


class WorkFailed(Exception):
    """The child's computation raised (its type and message), or the child died without a result."""


class ForkRunner:
    """Runs a function in a forked child and awaits its (picklable) result without blocking the event loop."""

    def __init__(self) -> None:
        self.children: set[int] = set()
        self._slots: asyncio.Semaphore | None = None

    async def run(self, fn: Callable[[], T]) -> T:
        if not hasattr(os, "fork"):
            return fn()
        if self._slots is None:
            self._slots = asyncio.Semaphore(MAX_CHILDREN)
        async with self._slots:
            read_fd, write_fd = os.pipe()
            parent = os.getpid()
            pid = os.fork()
            if pid == 0:  # the child: never returns
                _child(fn, read_fd, write_fd, parent)
            os.close(write_fd)
            self.children.add(pid)
            try:
                data = await _read_all(read_fd)
            except BaseException:  # cancelled (or the loop is closing): the child's work is not wanted
                self.kill(pid)
                raise
            finally:
                os.close(read_fd)
            self._reap(pid)
        try:
            status, value = pickle.loads(data)
        except Exception as exc:  # the child died before it wrote a whole result
            raise WorkFailed(f"the fix-all process ended without a result ({type(exc).__name__})") from None
        if status != "ok":
            raise WorkFailed(str(value))
        return value  # type: ignore[no-any-return]

    def kill(self, pid: int) -> None:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
        self._reap(pid)

    def kill_all(self) -> None:
        for pid in list(self.children):
            self.kill(pid)

    def _reap(self, pid: int) -> None:
        self.children.discard(pid)
        try:
            os.waitpid(pid, 0)  # it has closed its end of the pipe: it is exiting (or was killed)
        except ChildProcessError:
            pass


async def _read_all(fd: int) -> bytes:
    """Every byte from ``fd`` until end of file, read as the event loop reports it readable."""
    loop = asyncio.get_running_loop()
    os.set_blocking(fd, False)
    chunks: list[bytes] = []
    done: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        try:
            while True:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    if not done.done():
                        done.set_result(None)
                    return
                chunks.append(chunk)
        except BlockingIOError:
            return
        except OSError as exc:
            if not done.done():
                done.set_exception(exc)

    loop.add_reader(fd, readable)
    try:
        await done
    finally:
        loop.remove_reader(fd)
    return b"".join(chunks)


def _child(fn: Callable[[], Any], read_fd: int, write_fd: int, parent: int) -> None:
    code = 0
    try:
        os.close(read_fd)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)  # never the protocol's streams
        os.dup2(null, 1)
        os.close(null)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _die_with_parent(parent)
        try:
            payload: tuple[str, Any] = ("ok", fn())
        except BaseException as exc:
            payload = ("error", f"{type(exc).__name__}: {exc}")
        view = memoryview(pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL))
        while view:
            n = os.write(write_fd, view)
            view = view[n:]
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def _die_with_parent(parent: int) -> None:
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:
        os._exit(1)
