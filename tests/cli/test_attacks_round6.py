"""Round-6 adversarial findings (bench/accuracy/adversary-round6.md): each test failed before its fix."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from npu_lint.core.source import SourceFile
from npu_lint.engine.lint import check_source
from npu_lint.rules.device import _shared

REPO = Path(__file__).resolve().parents[2]


def run(
    *args: str, cwd: Path, stdin: str | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.run(
        [sys.executable, "-m", "npu_lint", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        input=stdin,
        timeout=timeout,
    )


def test_many_findings_in_one_function_stay_linear(monkeypatch: pytest.MonkeyPatch) -> None:
    """A6-17: every `.cuda()` under an `if` walked its whole function again to look for a local CUDA flag
    (`_guard_test`): 600 findings in one function took 82 s, 1,200 took 6 min, 3,000 never finished. The
    flags are now collected once per function."""
    count = 400
    text = "import torch\n\n\ndef f(x):\n" + "    if x:\n        x = x.cuda()\n" * count
    walked = 0
    real_walk = ast.walk

    def counting_walk(node: ast.AST):  # type: ignore[no-untyped-def]
        nonlocal walked
        if isinstance(node, ast.FunctionDef):
            walked += 1
        return real_walk(node)

    monkeypatch.setattr(_shared.ast, "walk", counting_walk)
    diags = check_source(SourceFile.from_text("m.py", text), ["NPU101"])
    assert sum(d.code == "NPU101" for d in diags) == count
    assert walked <= 5, walked


def _other_owner(monkeypatch: pytest.MonkeyPatch, write_mod: object) -> None:
    """Make the temporary file npu-lint writes look owned by someone else than the file it replaces."""
    real_fstat = os.fstat

    class Other:
        def __init__(self, st: os.stat_result) -> None:
            self.st = st
            self.st_uid = st.st_uid + 1

        def __getattr__(self, name: str) -> object:
            return getattr(self.st, name)

    def fstat(fd: int) -> object:
        return Other(real_fstat(fd))

    monkeypatch.setattr(write_mod.os, "fstat", fstat)  # type: ignore[attr-defined]


def test_fix_keeps_the_files_owner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A6-53: `--fix` run as root (a container on a mounted checkout) replaced a user's file by a new one
    owned by root (the atomic rename keeps the mode, not the owner): the user could no longer edit it. The
    replacement now gets the original's owner and group."""
    from npu_lint.engine import write

    target = tmp_path / "m.py"
    target.write_text("x = 1\n")
    st = target.stat()
    calls: list[tuple[int, int]] = []
    _other_owner(monkeypatch, write)
    monkeypatch.setattr(write.os, "chown", lambda path, uid, gid: calls.append((uid, gid)))
    write.write_atomic(str(target), "x = 2\n", "utf-8", (b"x = 1\n", st))
    assert calls == [(st.st_uid, st.st_gid)]
    assert target.read_text() == "x = 2\n"


def test_fix_writes_in_place_when_the_owner_cannot_be_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A6-53 (not root): a group-writable file of a teammate cannot be given back its owner; it is written in
    place (same inode, owner kept) instead of being replaced by a file of the one running npu-lint."""
    from npu_lint.engine import write

    target = tmp_path / "m.py"
    target.write_text("x = 1\n")
    st = target.stat()
    _other_owner(monkeypatch, write)

    def refuse(path: str, uid: int, gid: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(write.os, "chown", refuse)
    write.write_atomic(str(target), "x = 2\n", "utf-8", (b"x = 1\n", st))
    assert target.read_text() == "x = 2\n"
    assert target.stat().st_ino == st.st_ino
    assert not [p for p in tmp_path.iterdir() if p.name != "m.py"]
    if os.geteuid() == 0:  # for real: a file of another user, fixed by root, stays theirs
        real = tmp_path / "r.py"
        real.write_text("import torch\n\n\ndef f(x):\n    return x.cuda()\n")
        monkeypatch.undo()
        os.chown(real, 1000, 1000)
        res = run("check", "--no-cache", "--fix", "r.py", cwd=tmp_path)
        assert res.returncode == 0, res.stdout + res.stderr
        assert (real.stat().st_uid, real.stat().st_gid) == (1000, 1000)


def test_force_exclude_applies_to_stdin_filename(tmp_path: Path) -> None:
    """A6-37: `--force-exclude --stdin-filename skip/m.py --fix` (an editor fixing on save through stdin) fixed
    and reported a file the configuration excludes; the same path named as a file was left alone. The text
    now comes back unchanged, with no findings."""
    (tmp_path / "pyproject.toml").write_text('[tool.npu-lint]\nexclude = ["skip"]\n')
    text = "import torch\n\n\ndef f(x):\n    return x.cuda()\n"
    res = run("check", "--fix", "--force-exclude", "--stdin-filename", "skip/m.py", cwd=tmp_path, stdin=text)
    assert res.returncode == 0, res.stderr
    assert res.stdout == text
    assert "excluded" in res.stderr
    res = run("check", "--force-exclude", "--stdin-filename", "skip/m.py", cwd=tmp_path, stdin=text)
    assert (res.returncode, res.stdout) == (0, "")
    res = run("check", "--fix", "--force-exclude", "--stdin-filename", "m.py", cwd=tmp_path, stdin=text)
    assert "x.cuda()" not in res.stdout  # a path that is not excluded is still fixed


def test_an_exclude_pattern_with_many_double_stars_is_refused(tmp_path: Path) -> None:
    """A6-55: `exclude = ["d/**/d/**/...(20 times)/zz"]` against a 40-level directory: each `**` is a
    `(?:/.+)?` in pathspec's regex and the search backtracks exponentially (4 `**`: 14 ms per path, 8: 10 s;
    20 never finished). A configuration planted in a repository hung `check`, pre-commit and the server.
    More than three `**` components are refused in one line (exit 2)."""
    deep = tmp_path.joinpath(*["d"] * 40)
    deep.mkdir(parents=True)
    (deep / "m.py").write_text("x = 1\n")
    (tmp_path / "pyproject.toml").write_text('[tool.npu-lint]\nexclude = ["' + "d/**/" * 20 + 'zz"]\n')
    res = run("check", "--no-cache", ".", cwd=tmp_path, timeout=60)  # before the fix: hours
    assert res.returncode == 2, res.stdout + res.stderr
    assert "`**`" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    (tmp_path / "pyproject.toml").write_text('[tool.npu-lint]\nexclude = ["**/d/**/zz/**"]\n')
    assert run("check", "--no-cache", ".", cwd=tmp_path).returncode == 0


def test_open_low_observations_of_round6_are_closed(tmp_path: Path) -> None:
    """A6-41, A6-46 and the `**` limit, closed in the next session: an empty per-file-ignores pattern (git
    matches nothing with it) and a baseline whose version is `true` (`True == 1`) were accepted silently;
    adjacent `**` components (`a/**/**/b` means `a/**/b`) counted against the limit of three."""
    from npu_lint.core.config import ConfigError, load_config
    from npu_lint.engine.adopt import BaselineError, read_baseline

    cfg = tmp_path / "pyproject.toml"
    for table in ('per-file-ignores = {"" = ["NPU101"]}', 'exclude = ["!"]', 'exclude = ["  "]'):
        cfg.write_text(f"[tool.npu-lint]\n{table}\n")
        with pytest.raises(ConfigError, match="empty"):
            load_config(cfg)
    cfg.write_text('[tool.npu-lint]\nexclude = ["a/**/**/**/**/**/b", "./c/**/**/d"]\n')
    assert load_config(cfg).exclude == ["a/**/b", "/c/**/d"]
    base = tmp_path / "b.json"
    base.write_text('{"npu-lint-baseline": true, "findings": []}')
    with pytest.raises(BaselineError, match="not an npu-lint baseline"):
        read_baseline(str(base))
    base.write_text('{"npu-lint-baseline": 1, "findings": []}')
    assert read_baseline(str(base)) == {}


def test_a_dropped_fix_is_reported_at_the_line_of_the_text_written(tmp_path: Path) -> None:
    """A6-42: a fix dropped under `# fmt: skip` was reported at the line its finding had before the other fixes
    (and their formatting) moved it, while the same finding was listed at its new line."""
    (tmp_path / "pyproject.toml").write_text(
        '[tool.ruff]\nline-length = 80\n[tool.ruff.lint]\nselect = ["E"]\n'
    )
    (tmp_path / "t.py").write_text(
        "import torch\n\n\ndef combine_values(*values):\n    return values[0]\n\n\n"
        "def f(a_long_argument_name, b):\n"
        "    return combine_values(a_long_argument_name.cuda(), b, a_long_argument_name)\n\n\n"
        "def g(m):\n    return torch.relu(m.cuda())  # fmt: skip\n"
    )
    res = run("check", "--no-cache", "--fix", "t.py", cwd=tmp_path)
    lines = (tmp_path / "t.py").read_text().splitlines()
    at = next(i for i, line in enumerate(lines, 1) if "m.cuda()" in line)
    assert at > 9  # the first fix was wrapped over several lines
    reported = [line for line in res.stdout.splitlines() if line.startswith("t.py:")]
    assert reported == [
        f"t.py:{at}:25: NPU101 [*] `.cuda()` hard-codes the CUDA backend; use "
        '`.to(torch.accelerator.current_accelerator() or "cpu")`',
        f"t.py:{at}:25: NPU101 fix dropped: the line is under `# fmt: skip` or `# fmt: off` and would be longer "
        "than the tree's line length (80); nothing would wrap it",
    ]
