"""Messages a new user meets first: one error and no "All checks passed!", no abbreviations, a mistyped
subcommand, a missing output directory; the cache keeps itself out of git."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BAD = "def f(model):\n    return model.cuda()\n"


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "npu_lint", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
        timeout=300,
    )


def test_nonexistent_path_is_an_error_only(tmp_path: Path) -> None:
    res = run("--no-cache", "nosuch.py", cwd=tmp_path)
    assert res.returncode == 2
    assert "All checks passed" not in res.stdout
    assert res.stderr.strip() == "error: nosuch.py: no such file or directory"


def test_mistyped_subcommand(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text(BAD)
    res = run("chek", "bad.py", cwd=tmp_path)
    assert res.returncode == 2
    assert "did you mean `check`?" in res.stderr
    assert res.stdout == ""


def test_no_flag_abbreviations(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text(BAD)
    res = run("--no-cache", "--fi", "bad.py", cwd=tmp_path)
    assert res.returncode == 2
    assert "unrecognized arguments: --fi" in res.stderr
    assert (tmp_path / "bad.py").read_text() == BAD


def test_output_file_in_missing_directory(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text(BAD)
    res = run("--no-cache", "bad.py", "-o", str(tmp_path / "nodir" / "x.json"), cwd=tmp_path)
    assert res.returncode == 2
    assert len(res.stderr.strip().splitlines()) == 1
    assert "does not exist" in res.stderr and "internal error" not in res.stderr


def test_cache_is_gitignored(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text(BAD)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    run("bad.py", cwd=tmp_path)
    assert (tmp_path / ".npu_lint_cache" / ".gitignore").read_text().splitlines()[-1] == "*"
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert ".npu_lint_cache" not in status


def test_unknown_word_first(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text(BAD)
    res = run("--no-cache", "lint", "bad.py", cwd=tmp_path)
    assert res.returncode == 2
    assert (
        "error: lint: no such file or directory; `lint` is not a subcommand either (did you mean `check`?)"
        in (res.stderr)
    )
    assert "NPU101" in res.stdout  # the real path is still linted
