"""Bad input gets a clear message or NPU001, the documented exit code, the other files still linted,
and nothing written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BAD = "def f(model):\n    return model.cuda()\n"


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "npu_lint", "--no-cache", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
        timeout=300,
    )


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in root.rglob("*") if p.is_file() and not p.is_symlink()}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "veomni" / "ops").mkdir(parents=True)  # a VeOmni checkout: fixes may import its helpers
    (tmp_path / "bad.py").write_text(BAD)
    return tmp_path


def test_nonexistent_path(tree: Path) -> None:
    res = run("missing_dir", "bad.py", cwd=tree)
    assert res.returncode == 2
    assert "missing_dir: no such file or directory" in res.stderr
    assert "bad.py:2:18: NPU101" in res.stdout


def test_symlink_loop(tree: Path) -> None:
    (tree / "sub").mkdir()
    (tree / "sub" / "loop").symlink_to(tree, target_is_directory=True)
    (tree / "sub" / "self").symlink_to(tree / "sub", target_is_directory=True)
    res = run(".", cwd=tree)
    assert res.returncode == 1
    assert res.stdout.count("NPU101") == 1


@pytest.mark.parametrize(
    "name,data,message",
    [
        ("latin.py", "x = 'caf\xe9'\n".encode("latin-1"), "file could not be decoded"),
        ("syntax.py", b"def f(:\n    pass\n", "file could not be parsed"),
        ("cookie.py", b"# -*- coding: no-such-codec -*-\nx = 1\n", "file could not be decoded"),
    ],
)
def test_undecodable_or_unparsable_file_is_npu001(tree: Path, name: str, data: bytes, message: str) -> None:
    (tree / name).write_bytes(data)
    res = run("--fix", ".", cwd=tree)
    assert res.returncode == 1
    assert f"{name}:" in res.stdout and "NPU001" in res.stdout and message in res.stdout
    after = snapshot(tree)
    assert after[str(tree / name)] == data  # never written
    assert after[str(tree / "bad.py")] != BAD.encode()  # the other file was still fixed


def test_syntax_error_location(tree: Path) -> None:
    (tree / "syntax.py").write_text("x = 1\ny = (\n")
    res = run("--output-format", "concise", "syntax.py", cwd=tree)
    assert res.returncode == 1
    assert res.stdout.startswith("syntax.py:2:")


def test_bom_crlf_file_lints(tree: Path) -> None:
    (tree / "crlf.py").write_bytes(b"\xef\xbb\xbf" + b"def f(m):\r\n    return m.cuda()\r\n")
    res = run("--output-format", "concise", "crlf.py", cwd=tree)
    assert res.returncode == 1
    assert "crlf.py:2:14: NPU101" in res.stdout


def test_empty_file(tree: Path) -> None:
    (tree / "empty.py").write_bytes(b"")
    assert run("empty.py", cwd=tree).returncode == 0


def test_large_file(tree: Path) -> None:
    body = "".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(25_000))
    (tree / "large.py").write_text(body + BAD)
    res = run("--output-format", "concise", "large.py", cwd=tree)
    assert res.returncode == 1
    assert "large.py:50002:" in res.stdout


def test_deeply_nested_expression(tree: Path) -> None:
    (tree / "deep.py").write_text("x = " + "(" * 5000 + "1" + ")" * 5000 + "\n")
    (tree / "chain.py").write_text("x = " + " + ".join(["a"] * 100_000) + "\n")
    res = run(".", cwd=tree)
    assert res.returncode == 1
    assert "Traceback" not in res.stderr
    assert "deep.py" in res.stdout and "NPU001" in res.stdout
    assert "bad.py" in res.stdout


def test_malformed_pyproject(tree: Path) -> None:
    (tree / "pyproject.toml").write_text("[tool.npu-lint]\nselect = [\n")
    before = snapshot(tree)
    res = run("--fix", ".", cwd=tree)
    assert res.returncode == 2
    assert "malformed TOML" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert snapshot(tree) == before


def test_unknown_select_code(tree: Path) -> None:
    res = run("--select", "XYZ1", ".", cwd=tree)
    assert res.returncode == 2
    assert res.stderr.strip() == "npu-lint: error: unknown rule code or prefix `XYZ1` in select"
