"""A reader that stops reading (`npu-lint rule NPU702 | head`) ends every command quietly: no traceback, no
"internal error", exit 141 (128 + SIGPIPE, as a shell reports a tool killed by the closed pipe)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from npu_lint import cli

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "veomni" / "models" / "transformers" / "toy"


def run_into_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first write
    try:
        return subprocess.run(
            [sys.executable, "-m", "npu_lint", *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
    finally:
        os.close(write_end)


@pytest.mark.parametrize(
    "args",
    [
        ("rule", "NPU702"),
        ("check", "--no-cache", str(EXAMPLE)),
        ("check", "--no-cache", "--output-format", "json", str(EXAMPLE)),
        ("audit", str(EXAMPLE)),
    ],
    ids=["rule", "check", "check-json", "audit"],
)
def test_closed_pipe_is_quiet(args: tuple[str, ...]) -> None:
    proc = run_into_closed_pipe(*args)
    assert proc.stderr == ""
    assert proc.returncode == cli.EXIT_BROKEN_PIPE


def test_verify_closed_pipe_is_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    import npu_lint.verify.cli as verify_cli

    def broken(args: object) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(verify_cli, "run_verify", broken)
    monkeypatch.setattr(cli, "_drop_stdout", lambda: None)  # keep pytest's own stdout
    assert cli.main(["verify", str(EXAMPLE)]) == cli.EXIT_BROKEN_PIPE
