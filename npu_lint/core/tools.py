"""Helper tools run from npu-lint's own environment, never from the linted tree.

The linted tree is data: no helper is started with the tree as its working directory or on its ``sys.path``,
and no helper is found by importing a module (``python -m ruff`` from a tree with a ``ruff/`` package would run
that package). ruff is a runtime dependency; its binary is looked up by absolute path in the scripts directory
of the interpreter running npu-lint (the place pip installed it), never on the tree's ``PATH`` entries.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Sequence
from pathlib import Path

_RUFF: list[str | None] = []


def _script_dirs() -> list[Path]:
    dirs: list[Path] = []
    for scheme in (None, f"{os.name}_user"):
        try:
            path = sysconfig.get_path("scripts") if scheme is None else sysconfig.get_path("scripts", scheme)
        except KeyError:
            continue
        if path:
            dirs.append(Path(path))
    dirs.append(Path(sys.executable).parent)
    return dirs


def ruff_binary() -> str | None:
    """The absolute path of the ruff binary installed with npu-lint (None when there is none)."""
    if _RUFF:
        return _RUFF[0]
    found = None
    name = "ruff.exe" if os.name == "nt" else "ruff"
    for directory in _script_dirs():
        candidate = directory / name
        try:
            if candidate.is_file() and os.access(candidate, os.X_OK):
                found = str(candidate.resolve())
                break
        except OSError:
            continue
    _RUFF.append(found)
    return found


def neutral_cwd() -> str:
    """A working directory for helper processes that is not the linted tree."""
    return tempfile.gettempdir()


RUFF_WAIT = 30.0  # seconds one ruff call may take
# ruff configuration roots (the directory of the [tool.ruff] / ruff.toml governing a file) where ruff did not answer
# in RUFF_WAIT: a configuration it reads blocks (an `extend` naming a FIFO, a stalled mount). ruff is not asked
# there again in this process, so a hostile or broken tree costs one wait, not one per fixed file.
_STALLED: dict[str, str] = {}


def _ruff_root(path: str) -> str:
    from npu_lint.core.imports import ruff_style

    try:
        return ruff_style(os.path.dirname(os.path.abspath(path))).root or ""
    except (OSError, ValueError):
        return ""


def ruff_stalled(path: str) -> bool:
    """Whether ruff already failed to answer in time for files governed like ``path`` (see ``_STALLED``)."""
    return bool(_STALLED) and _ruff_root(path) in _STALLED


def mark_ruff_stalled(path: str) -> None:
    """Record that ruff did not answer for ``path``'s configuration, and say so once (stderr)."""
    root = _ruff_root(path)
    if root in _STALLED:
        return
    _STALLED[root] = path
    print(
        f"npu-lint: warning: ruff did not answer within {RUFF_WAIT:g} s for {root or path} (a configuration it "
        "reads may block: an `extend` naming a FIFO, a stalled mount); fixes there are left unformatted",
        file=sys.stderr,
    )


def communicate_tool(proc: subprocess.Popen[str], text: str, path: str) -> str | None:
    """``proc``'s standard output for ``text`` on its input; None (the process killed) when it fails or takes
    longer than ``RUFF_WAIT`` (then ``path``'s configuration is marked stalled)."""
    try:
        stdout, _ = proc.communicate(text, timeout=RUFF_WAIT)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        proc.kill()
        proc.wait()
        if isinstance(exc, subprocess.TimeoutExpired):
            mark_ruff_stalled(path)
        return None
    return stdout


def run_tool(argv: Sequence[str], stdin: str, timeout: float = 30) -> subprocess.Popen[str]:
    """Start a helper binary (absolute path) in a neutral directory with a clean ``PYTHONPATH``."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME")}
    return subprocess.Popen(
        list(argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=neutral_cwd(),
        env=env,
    )


def ruff_format_range(text: str, path: str, first: int, last: int, timeout: float = 30) -> str | None:
    """``text`` with the statements covering lines ``first``..``last`` (1-based, inclusive) formatted by
    ``ruff format --range``, under the ruff configuration that governs ``path`` (found from the path given
    as ``--stdin-filename``); the rest of the text is left as it is. None when ruff is missing or fails."""
    binary = ruff_binary()
    if binary is None or ruff_stalled(path):
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (an editor buffer): ruff reads UTF-8 only; left unformatted
        return None
    lines = re.split(r"\r\n|\r|\n", text)  # ruff's lines (never str.splitlines: it breaks at form feeds too)
    if lines and lines[-1] == "":
        lines.pop()
    if not lines or first < 1:
        return None
    last = min(last, len(lines))
    end_col = len(lines[last - 1]) + 1
    argv = [binary, "format", "--no-cache", "--range", f"{first}:1-{last}:{end_col}"]
    argv += ["--stdin-filename", os.path.abspath(path), "-"]
    try:
        proc = run_tool(argv, text)
    except OSError:
        return None
    stdout = communicate_tool(proc, text, path)
    if stdout is None or proc.returncode != 0 or (text.strip() and not stdout.strip()):
        return None
    return stdout


def ruff_isort(text: str, path: str) -> str | None:
    """``text`` with its imports sorted and merged by ``ruff check --select I001 --fix`` under the configuration
    that governs ``path`` (the tree's own isort settings); None when ruff is missing, stalled or fails."""
    binary = ruff_binary()
    if binary is None or ruff_stalled(path):
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return None
    argv = [binary, "check", "--no-cache", "--select", "I001", "--fix", "--exit-zero", "--quiet"]
    argv += ["--stdin-filename", os.path.abspath(path), "-"]
    try:
        proc = run_tool(argv, text)
    except OSError:
        return None
    stdout = communicate_tool(proc, text, path)
    if stdout is None or proc.returncode != 0 or (text.strip() and not stdout.strip()):
        return None
    return stdout
