"""Adversary round 3 (bench/accuracy/adversary-round3.md): one test per fixed break."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BAD = "import torch\n\n\ndef f(model):\n    return model.cuda()\n"


def run(
    *args: str, cwd: Path, stdin: bytes | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "npu_lint", *args],
        cwd=cwd,
        capture_output=True,
        input=stdin,
        env={**os.environ, "NO_COLOR": "1", **(env or {})},
        timeout=120,
    )


# -- B1: a coding cookie naming a codec that is not a text encoding ------------------------------------------------


@pytest.mark.parametrize("codec", ["rot13", "hex", "base64", "zlib_codec", "undefined"])
def test_non_text_codec_cookie_is_a_problem_of_its_file_only(tmp_path: Path, codec: str) -> None:
    (tmp_path / "a.py").write_text(f"# coding: {codec}\nimport torch\n")
    (tmp_path / "b.py").write_text(BAD)
    res = run("check", "--no-cache", "--fix", ".", cwd=tmp_path)
    out, err = res.stdout.decode(), res.stderr.decode()
    assert "internal error" not in err and "Traceback" not in err, err
    assert res.returncode == 1, (out, err)
    assert "a.py:1:1: NPU001" in out and codec in out
    assert ".cuda()" not in (tmp_path / "b.py").read_text()


def test_non_text_codec_cookie_on_standard_input_is_a_one_line_error(tmp_path: Path) -> None:
    res = run(
        "check",
        "--no-cache",
        "--stdin-filename",
        "x.py",
        "-",
        cwd=tmp_path,
        stdin=b"# coding: rot13\nx = 1\n",
    )
    err = res.stderr.decode()
    assert res.returncode == 2 and "internal error" not in err and "rot13" in err, err
