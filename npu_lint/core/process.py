"""The one way npu-lint runs code it does not trust (``verify``'s checks, ``--live-registry``'s import).

* The child starts a session of its own (``start_new_session``): on a timeout the whole process group is killed
  (grandchildren too), and once the child exits whatever it left running in its group is killed as well.
* A descendant that leaves the group (``setsid()``, a double fork) is caught too, on Linux: while a child runs,
  npu-lint is a *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``), so an orphaned descendant is re-parented
  to npu-lint instead of ``init``; once the child is gone, every such process (a child of npu-lint that was not
  one before the run and is in another session) is killed with its group and reaped, until none is left
  (``EscapeGuard``). Elsewhere only the group is killed.
* Its environment is minimal (``minimal_env``): ``PATH`` (the interpreter's directory first), ``HOME`` and
  ``TMPDIR`` in a fresh temporary directory, ``LANG``, and only the variables the caller sets (``PYTHONPATH``
  among them); nothing else of the user's environment (tokens, proxies, ``LD_PRELOAD``) reaches it.
* Its answer comes back on a pipe (``NPU_LINT_RESULT_FD``), never through a file or its standard output, and is
  authenticated: a fresh key goes to the child on standard input, which the child reads (and closes) before
  it runs any code under test, and the answer must carry an HMAC-SHA256 under that key. Code under test that
  prints a verdict, writes a result file, or writes to the pipe without the key is not believed.
  (Code running inside the child's own interpreter could still, with deliberate effort, find the key in
  memory: this protects against accidents and casual forgery, not against an adversary in the process.)

``child_read_key`` / ``child_send`` are the child's side (``verify/_child.py`` keeps its own copy: it runs
without npu-lint on its path).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import signal
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

MAX_TIMEOUT = 7 * 24 * 3600.0  # a week: beyond it, `time.monotonic() + timeout` stops meaning a deadline


def timeout_seconds(value: str) -> float:
    """An argparse ``type`` for ``--timeout``: a finite number of seconds above zero (``nan`` compares false
    with every deadline, so a child given ``nan`` would never be stopped; ``-1`` or ``inf`` neither)."""
    import math

    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (0 < seconds <= MAX_TIMEOUT):
        import argparse

        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0 and at most {MAX_TIMEOUT:.0f}")
    return seconds


RESULT_FD_ENV = "NPU_LINT_RESULT_FD"
MAX_RESULT_BYTES = 16 * 1024 * 1024
MAX_OUTPUT_BYTES = 1024 * 1024  # of stdout / stderr, the tail is kept


@dataclass
class ChildOutcome:
    returncode: int | None  # None: killed on timeout
    stdout: str
    stderr: str
    result: object | None  # the authenticated answer (parsed JSON), or None
    result_problem: str  # why there is no result ("" when there is one)
    timed_out: bool = False


def minimal_env(python: str, home: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a child: only what it needs."""
    path = [str(Path(python).parent), *(os.defpath.split(os.pathsep) if os.defpath else [])]
    env = {
        "PATH": os.pathsep.join(p for p in dict.fromkeys(path) if p),
        "HOME": home,
        "TMPDIR": home,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2"),
        "TOKENIZERS_PARALLELISM": "false",
    }
    if extra:
        env.update(extra)
    return env


def _drain(fd: int, sink: list[bytes], limit: int, keep_tail: bool) -> None:
    """Read ``fd`` to its end into ``sink``: beyond ``limit`` bytes either the tail is kept or (``keep_tail``
    false) reading stops with an empty chunk appended as the overflow mark and the rest is discarded."""
    size = 0
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return
        sink.append(chunk)
        size += len(chunk)
        if size > limit:
            if not keep_tail:
                sink.append(b"")
                _discard(fd)
                return
            while size > limit and len(sink) > 1:
                size -= len(sink.pop(0))


def _discard(fd: int) -> None:
    while os.read(fd, 1 << 16):
        pass


def kill_group(pid: int) -> None:
    """SIGKILL the process group ``pid`` (nothing when it is gone)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass


_PR_SET_CHILD_SUBREAPER = 36
_subreaper_lock = threading.Lock()
_subreaper_users = 0


def _set_subreaper(on: bool) -> bool:
    """Turn the Linux child-subreaper attribute of this process on or off; False where it is not available."""
    if not os.path.isdir("/proc/self/task"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1 if on else 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _children() -> set[int]:
    """The pids of this process's children (every thread's), from ``/proc/self/task/*/children``."""
    from npu_lint.core.safeio import read_regular

    pids: set[int] = set()
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return pids
    for tid in tasks:
        try:
            data, _ = read_regular(f"/proc/self/task/{tid}/children", limit=1 << 20)
        except OSError:
            continue
        pids.update(int(p) for p in data.split() if p.isdigit())
    return pids


class EscapeGuard:
    """Catch the descendants of an untrusted child that leave its process group (see the module docstring).

    ``with EscapeGuard() as guard:`` around starting and waiting for the child, then ``guard.kill_escaped()``
    once the child is gone (and its group killed)."""

    def __init__(self) -> None:
        self.active = False
        self.before: set[int] = set()

    def __enter__(self) -> EscapeGuard:
        global _subreaper_users
        with _subreaper_lock:
            if _subreaper_users or _set_subreaper(True):
                _subreaper_users += 1
                self.active = True
        if self.active:
            self.before = _children()
        return self

    def kill_escaped(self, limit: int = 1000) -> int:
        """Kill and reap every re-parented descendant, repeatedly (killing one re-parents its children to us);
        the number killed."""
        if not self.active:
            return 0
        import time

        killed = 0
        own_session = os.getsid(0)
        quiet_rounds = 0
        while killed < limit and quiet_rounds < 3:
            escaped = []
            for pid in _children() - self.before:
                try:
                    if os.getsid(pid) != own_session:
                        escaped.append(pid)
                except OSError:
                    continue
            if not escaped:
                quiet_rounds += 1  # a dying parent re-parents its children a moment later
                time.sleep(0.01)
                continue
            quiet_rounds = 0
            for pid in escaped:
                for kill in (os.killpg, os.kill):
                    try:
                        kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
                try:
                    os.waitpid(pid, 0)
                except ChildProcessError:
                    pass
                killed += 1
        return killed

    def __exit__(self, *exc: object) -> None:
        global _subreaper_users
        if not self.active:
            return
        self.kill_escaped()
        with _subreaper_lock:
            _subreaper_users -= 1
            if not _subreaper_users:
                _set_subreaper(False)


def _exited_unreaped(pid: int, timeout: float) -> bool:
    """Wait until the child exits, without reaping it (``WNOWAIT``); False on timeout."""
    import time

    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        try:
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG)
        except ChildProcessError:
            return True
        if info is not None and info.si_pid == pid:
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(delay, left))
        delay = min(delay * 2, 0.1)


def run_untrusted(
    argv: list[str],
    *,
    cwd: str,
    timeout: float,
    python: str,
    stdin_data: bytes = b"",
    extra_env: dict[str, str] | None = None,
) -> ChildOutcome:
    """Run ``argv`` (a child that speaks the result protocol) and return what it said, authenticated."""
    key = secrets.token_bytes(32)
    read_end, write_end = os.pipe()
    with tempfile.TemporaryDirectory(prefix="npu-lint-child-") as home, EscapeGuard() as guard:
        env = minimal_env(python, home, {**(extra_env or {}), RESULT_FD_ENV: str(write_end)})
        try:
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(write_end,),
                start_new_session=True,
            )
        except OSError:
            os.close(read_end)
            os.close(write_end)
            raise
        os.close(write_end)
        out: list[bytes] = []
        err: list[bytes] = []
        res: list[bytes] = []
        threads = [
            threading.Thread(
                target=_drain, args=(proc.stdout.fileno(), out, MAX_OUTPUT_BYTES, True), daemon=True
            ),  # type: ignore[union-attr]
            threading.Thread(
                target=_drain, args=(proc.stderr.fileno(), err, MAX_OUTPUT_BYTES, True), daemon=True
            ),  # type: ignore[union-attr]
            threading.Thread(target=_drain, args=(read_end, res, MAX_RESULT_BYTES, False), daemon=True),
        ]
        for t in threads:
            t.start()
        try:
            proc.stdin.write(key.hex().encode() + b"\n" + stdin_data)  # type: ignore[union-attr]
            proc.stdin.close()  # type: ignore[union-attr]
        except (BrokenPipeError, OSError):
            pass
        try:
            timed_out = not _exited_unreaped(proc.pid, timeout)
        except BaseException:  # ^C / SIGTERM: nothing of the child survives npu-lint
            kill_group(proc.pid)
            proc.wait()
            raise
        # on a timeout the child; in every case what it left running in its group. The child is not reaped yet
        # (a zombie keeps its pid, hence the group id, from being reused): the kill cannot reach another group
        kill_group(proc.pid)
        proc.wait()
        guard.kill_escaped()  # descendants that left the group hold the pipes open: they go before the reads end
        for t in threads:
            t.join(timeout=10)
        os.close(read_end)
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()  # type: ignore[union-attr]
    stdout = b"".join(out).decode("utf-8", "replace")
    stderr = b"".join(err).decode("utf-8", "replace")
    result, problem = _verify(b"".join(res), key, overflow=bool(res) and res[-1] == b"")
    return ChildOutcome(None if timed_out else proc.returncode, stdout, stderr, result, problem, timed_out)


def _verify(data: bytes, key: bytes, overflow: bool = False) -> tuple[object | None, str]:
    if overflow:
        return None, f"the answer exceeded {MAX_RESULT_BYTES} bytes"
    if not data:
        return None, "no answer on the result channel"
    try:
        envelope = json.loads(data)
        payload, mac = envelope["payload"], envelope["mac"]
        if not isinstance(payload, str) or not isinstance(mac, str):
            raise TypeError
    except (ValueError, KeyError, TypeError, RecursionError):
        return (
            None,
            "the result channel held something that is not an answer (written by the code under test?)",
        )
    expected = hmac.new(key, payload.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, mac):
        return None, "the answer on the result channel is not authenticated (written by the code under test?)"
    try:
        return json.loads(payload), ""
    except (ValueError, RecursionError):
        return None, "the authenticated answer is not JSON"


# -- the child's side ------------------------------------------------------------------------------------------


def child_read_key() -> tuple[bytes, bytes]:
    """(key, the rest of standard input); standard input is then closed (``/dev/null``)."""
    import sys

    line = sys.stdin.buffer.readline(200)
    rest = sys.stdin.buffer.read(MAX_RESULT_BYTES)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    return bytes.fromhex(line.strip().decode("ascii")), rest


def child_send(key: bytes, answer: object) -> None:
    """Write the authenticated answer on the result pipe."""
    payload = json.dumps(answer)
    mac = hmac.new(key, payload.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()
    data = json.dumps({"payload": payload, "mac": mac}).encode()
    fd = int(os.environ[RESULT_FD_ENV])
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]
    os.close(fd)
