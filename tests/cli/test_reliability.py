"""Reliability and security (issue 15): npu-lint never runs the linted tree, never loses an edit, never trusts
its cache, never hangs on special files, and never reports a silent clean.

Each test is one attack of bench/accuracy/robustness.md (re-run as a table by bench/robustness.py)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from npu_lint.core.config import Settings
from npu_lint.engine import fix_tree, lint_paths, project_diagnostics
from npu_lint.veomni.project import load_project

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "packaging" / "tree"
WIDGET = Path("veomni/models/transformers/widget")
BAD = "import torch\n\n\ndef f(model):\n    return model.cuda()\n"
# fixable without VeOmni's device helpers (outside a VeOmni tree no fix imports them): the device of a tensor
FIXABLE = "import torch\n\n\ndef f(model, hidden_states: torch.Tensor):\n    return model.cuda()\n"


def run(*args: str, cwd: Path, timeout: float = 120, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "npu_lint", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
        timeout=timeout,
        **kw,  # type: ignore[arg-type]
    )


# -- never execute the linted tree ------------------------------------------------------------------------


def _booby_trap(tree: Path, marker: Path) -> None:
    payload = f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\n"
    for package in ("ruff", "pathspec", "libcst", "astroid"):
        (tree / package).mkdir()
        (tree / package / "__init__.py").write_text(payload)
        (tree / package / "__main__.py").write_text(payload)
    init = tree / "veomni" / "__init__.py"
    init.write_text(init.read_text() + payload)
    (tree / "veomni" / "ops").mkdir(exist_ok=True)
    (tree / "veomni" / "ops" / "__init__.py").write_text(payload)


def test_no_command_runs_the_linted_tree(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES, tree)
    marker = tmp_path / "MARKER"
    _booby_trap(tree, marker)
    commands = [
        ("check", "--no-cache", "veomni"),
        ("check", "--no-cache", "--diff", "--unsafe-fixes", "veomni"),
        ("check", "veomni"),  # with the cache
        ("check", "--fix", "--unsafe-fixes", "veomni"),  # NPU501 creates and formats a spec
        ("audit", str(WIDGET)),
        ("rule", "NPU501"),
    ]
    for args in commands:
        res = run(*args, cwd=tree)
        assert res.returncode in (0, 1), (args, res.stderr)
        assert not marker.exists(), (args, marker.read_text())
    created = (tree / WIDGET / "widget_npu_patch_gen_config.py").read_text()
    expected = (FIXTURES.parent / "expected" / "widget_npu_patch_gen_config.py").read_text()
    assert created == expected  # formatted by npu-lint's own ruff, not the tree's


def test_server_and_its_code_actions_do_not_run_the_linted_tree(tmp_path: Path) -> None:
    import importlib.util

    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES, tree)
    marker = tmp_path / "MARKER"
    _booby_trap(tree, marker)
    spec = importlib.util.spec_from_file_location(
        "lsp_raw", Path(__file__).parents[2] / "bench" / "lsp_raw.py"
    )
    raw = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(raw)  # type: ignore[union-attr]
    client = raw.RawClient(tree)
    actions = 0
    try:
        client.initialize()
        for rel in sorted((tree / WIDGET).rglob("*.py")):
            uri = rel.as_uri()
            client.open(uri, rel.read_text())
            diags = client.diagnostics_for(uri)
            whole = {"start": {"line": 0, "character": 0}, "end": {"line": 10_000, "character": 0}}
            for only in (["source.fixAll"], ["quickfix"]):
                context = {"diagnostics": diags, "only": only}
                answer = client.request(
                    "textDocument/codeAction",
                    {"textDocument": {"uri": uri}, "range": whole, "context": context},
                )
                assert "result" in answer, answer
                actions += len(answer["result"] or [])
    finally:
        client.close()
    assert actions  # fixes were built (libcst codemods included), and nothing of the tree ran
    assert not marker.exists(), marker.read_text()


def test_live_registry_says_it_imports_the_tree(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES, tree)
    res = run("check", "--no-cache", "--live-registry", "veomni", cwd=tree)
    assert "imported veomni.ops (the tree's code) in a subprocess" in res.stderr or (
        "--live-registry:" in res.stderr and res.returncode == 2
    )


# -- -o writes only regular files ---------------------------------------------------------------------------


def test_output_file_never_replaces_symlink_or_fifo(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text(BAD)
    real = tmp_path / "real.txt"
    real.write_text("old\n")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    res = run("check", "--no-cache", "bad.py", "-o", str(link), cwd=tmp_path)
    assert res.returncode == 1
    assert link.is_symlink() and "NPU101" in real.read_text()

    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    res = run("check", "--no-cache", "bad.py", "-o", str(fifo), cwd=tmp_path)
    reader.join(30)
    assert res.returncode == 1 and b"NPU101" in got[0]
    assert fifo.is_fifo()


def test_output_file_in_missing_directory_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text(BAD)
    res = run("check", "--no-cache", "bad.py", "-o", str(tmp_path / "nope" / "out.txt"), cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and "no such directory" in res.stderr


def test_output_file_dev_null_stays_a_device(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text(BAD)
    res = run("check", "--no-cache", "bad.py", "-o", "/dev/null", cwd=tmp_path)
    assert res.returncode == 1
    assert Path("/dev/null").is_char_device()


# -- fixes apply only to the text they were computed on --------------------------------------------------


def _lint_tree(tree: Path, codes: list[str]) -> tuple[list, Settings, object]:
    settings = Settings(root=str(tree))
    paths = sorted(str(p) for p in (tree / "veomni").rglob("*.py"))
    project = load_project([str(tree / "veomni")], settings)
    results = lint_paths(paths, codes, settings, project, jobs=1)
    diags = [d for r in results for d in r.diagnostics]
    diags += project_diagnostics(project, paths, codes, settings, fix_mode=True)
    return diags, settings, project


def test_project_fix_is_skipped_when_the_file_changed_after_lint(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES, tree)
    codes = ["NPU101", "NPU502"]
    diags, settings, project = _lint_tree(tree, codes)
    assert any(d.code == "NPU502" and d.fix and d.fix.basis for d in diags)
    init = tree / WIDGET / "__init__.py"
    edited = "\n" + init.read_text()  # the user adds a blank line while the run is going on
    init.write_text(edited)
    done = fix_tree(diags, codes, settings, project, unsafe=True)
    assert init.read_text() == edited  # no stale offset applied
    assert any("NPU502 fix skipped: the file changed after it was linted" in m for m in done.dropped)
    assert not done.errors


def test_concurrent_write_wins_over_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.py"
    path.write_text(BAD)
    settings = Settings(root=str(tmp_path))
    res = lint_paths([str(path)], ["NPU101"], settings, None, jobs=1)
    import npu_lint.engine.fix as fix_module

    real = fix_module.fix_source

    def slow_fix(*args: object, **kwargs: object):  # noqa: ANN202 - the editor saves meanwhile
        out = real(*args, **kwargs)
        path.write_text(BAD + "# saved by the editor\n")
        return out

    monkeypatch.setattr(fix_module, "fix_source", slow_fix)
    done = fix_tree(res[0].diagnostics, ["NPU101"], settings, None, unsafe=True)
    assert path.read_text() == BAD + "# saved by the editor\n"
    assert done.errors and "concurrent write won" in done.errors[0]


def test_editor_save_loop_loses_nothing(tmp_path: Path) -> None:
    """An editor saves every 20 ms while fixes run: every save is either kept or fixed, never replaced by a
    fix of an older save, and the file is never a mix."""
    path = tmp_path / "m.py"
    stop = threading.Event()
    lost: list[tuple[int, int]] = []
    last = [0]

    def editor() -> None:
        n = 0
        while not stop.is_set():
            if n:
                current = path.read_text()
                seen = int(current.rsplit("# save ", 1)[1].split()[0])
                if seen != n:
                    lost.append((n, seen))
            n += 1
            path.write_text(BAD + f"# save {n}\n")
            last[0] = n
            time.sleep(0.02)

    path.write_text(BAD + "# save 0\n")
    thread = threading.Thread(target=editor)
    thread.start()
    settings = Settings(root=str(tmp_path))
    fixed = conflicts = 0
    deadline = time.monotonic() + 2.0
    try:
        while time.monotonic() < deadline:
            res = lint_paths([str(path)], ["NPU101"], settings, None, jobs=1)
            done = fix_tree(res[0].diagnostics, ["NPU101"], settings, None, unsafe=True)
            fixed += bool(done.fixed_counts)
            conflicts += len(done.errors)
    finally:
        stop.set()
        thread.join()
    assert not lost, lost
    assert path.read_text().endswith(f"# save {last[0]}\n")
    assert fixed + conflicts > 0


# -- per-file isolation, links -----------------------------------------------------------------------------


def test_one_failing_file_does_not_stop_the_fix(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "a.py").write_text(FIXABLE)
    (tmp_path / "b.py").write_text(FIXABLE)
    long_name = "x" * 248 + ".py"  # the temporary name must not overflow NAME_MAX
    (tmp_path / long_name).write_text(FIXABLE)
    os.chmod(ro, 0o555)
    try:
        res = run("check", "--no-cache", "--fix", "--unsafe-fixes", "--select", "NPU101", ".", cwd=tmp_path)
    finally:
        os.chmod(ro, 0o755)
    assert ".cuda()" not in (tmp_path / "b.py").read_text()
    assert ".cuda()" not in (tmp_path / long_name).read_text()
    if os.geteuid() != 0:  # root writes into a read-only directory anyway
        assert res.returncode == 2
        assert "ro/a.py: cannot fix" in res.stderr


def test_a_read_only_file_is_not_replaced(tmp_path: Path) -> None:
    ro = tmp_path / "ro.py"
    ro.write_text(FIXABLE)
    ro.chmod(0o444)
    (tmp_path / "b.py").write_text(FIXABLE)
    res = run("check", "--no-cache", "--fix", "--unsafe-fixes", "--select", "NPU101", ".", cwd=tmp_path)
    assert res.returncode == 2
    assert "ro.py: cannot fix: read-only file" in res.stderr
    assert ro.read_text() == FIXABLE and stat.S_IMODE(ro.stat().st_mode) == 0o444  # even as root
    assert ".cuda()" not in (tmp_path / "b.py").read_text()


def test_after_a_fix_run_the_summary_does_not_offer_the_fixes_that_failed(tmp_path: Path) -> None:
    ro = tmp_path / "ro.py"
    ro.write_text(FIXABLE)
    ro.chmod(0o444)
    res = run("check", "--no-cache", "--fix", "--unsafe-fixes", "--select", "NPU101", ".", cwd=tmp_path)
    assert "1 fix could not be applied in this run" in res.stdout + res.stderr
    assert "fixable with the" not in res.stdout + res.stderr
    res = run("check", "--no-cache", "--unsafe-fixes", "--select", "NPU101", ".", cwd=tmp_path)
    assert "[*] 1 fixable with the `--fix --unsafe-fixes` option." in res.stdout  # without --fix: offered


def test_links_keep_their_identity(tmp_path: Path) -> None:
    target = tmp_path / "real.py"
    target.write_text(FIXABLE)
    hard = tmp_path / "hard.py"
    os.link(target, hard)
    link = tmp_path / "link.py"
    link.symlink_to(target)
    res = run("check", "--no-cache", "--select", "NPU101", ".", cwd=tmp_path)
    assert res.stdout.count("NPU101") == 2  # the symlink inside the directory is not followed
    run("check", "--no-cache", "--fix", "--unsafe-fixes", "--select", "NPU101", "link.py", cwd=tmp_path)
    assert link.is_symlink() and ".cuda()" not in target.read_text()  # written through
    assert os.stat(target).st_ino == os.stat(hard).st_ino  # the hard link still shares the file
    target.write_text(FIXABLE)
    run("check", "--no-cache", "--fix", "--unsafe-fixes", "--select", "NPU101", "hard.py", cwd=tmp_path)
    assert os.stat(target).st_ino == os.stat(hard).st_ino and ".cuda()" not in target.read_text()


def test_symlink_loop_is_reported_per_path(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text(BAD)
    (tmp_path / "loop.py").symlink_to(tmp_path / "loop.py")
    res = run("check", "--no-cache", "loop.py", "bad.py", cwd=tmp_path)
    assert res.returncode == 2 and "loop.py: symbolic link loop" in res.stderr
    assert "NPU101" in res.stdout
    res = run("check", "--no-cache", ".", cwd=tmp_path)  # inside a directory: not followed
    assert res.returncode == 1, res.stderr


def test_stale_temp_files_are_removed(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text(BAD)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    stale = tmp_path / f".bad.py.npu-lint-{dead.stdout.strip()}.0badf00d.tmp"
    stale.write_text("half")
    foreign = tmp_path / ".bad.py.abcd.tmp"  # not ours: kept
    foreign.write_text("x")
    orphan = tmp_path / f".notes.txt.npu-lint-{dead.stdout.strip()}.0badf00d.tmp"  # no notes.txt beside it
    orphan.write_text("a user's file")
    run("check", "--no-cache", ".", cwd=tmp_path)
    assert stale.exists(), "a read-only run deletes nothing"
    run("check", "--no-cache", "--fix", ".", cwd=tmp_path)
    assert not stale.exists() and foreign.exists() and orphan.exists()


# -- the cache holds findings, never fixes ------------------------------------------------------------------


def _entries(tree: Path) -> list[Path]:
    """The cache files holding an NPU101 finding (the run's index)."""
    return [p for p in (tree / ".npu_lint_cache").rglob("*.json") if "NPU101" in p.read_text()]


def test_crafted_cache_entries_are_ignored(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text(BAD)
    assert run("check", "bad.py", cwd=tmp_path).returncode == 1
    (entry,) = _entries(tmp_path)
    mac, _, payload = entry.read_bytes().partition(b"\n")
    evil = json.loads(payload)
    for file in evil["files"].values():
        file["diags"] = []  # "hide every finding"
    entry.write_bytes(mac + b"\n" + json.dumps(evil).encode())
    res = run("check", "bad.py", cwd=tmp_path)
    assert res.returncode == 1 and "NPU101" in res.stdout
    assert "ignored 1 invalid cache entry" in res.stderr
    entry.unlink()
    entry.symlink_to("/dev/zero")
    res = run("check", "bad.py", cwd=tmp_path, timeout=60)
    assert res.returncode == 1 and "NPU101" in res.stdout
    entry.unlink()
    entry.write_text('[{"code": 1}]')  # wrong types: no internal error
    res = run("check", "bad.py", cwd=tmp_path)
    assert res.returncode == 1 and "internal error" not in res.stderr


_PLANT = """
import os
from npu_lint.cli import main
from npu_lint.core.diagnostics import Diagnostic, Edit, Fix
from npu_lint.engine import cache as cache_module

runs = []
flush = cache_module.Cache.flush
cache_module.Cache.flush = lambda self: (runs.append(self), flush(self))[1]
assert main(["check", "--jobs", "1", "bad.py"]) == 1
(cache,) = runs
path = os.path.abspath("bad.py")
evil_fix = Fix("x", (Edit(0, 0, "import os; os.system('touch PWNED')\\n"),), creates=())
diag = Diagnostic("NPU101", "n", "planted-message", path, 5, 11, 5, 17, fix=evil_fix)
cache.store(path, cache.keys["bad.py"], os.stat(path), [diag])
flush(cache)
"""


def test_cached_fix_edits_are_never_applied(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text(BAD)
    # a validly signed index (written by npu-lint's own cache, in a run like the ones below) with a
    # malicious edit
    subprocess.run(
        [sys.executable, "-c", _PLANT], cwd=tmp_path, env={**os.environ, "NO_COLOR": "1"}, check=True
    )
    assert "planted-message" in run("check", "bad.py", cwd=tmp_path).stdout  # the planted entry is used
    run("check", "--fix", "bad.py", cwd=tmp_path)
    assert "os.system" not in (tmp_path / "bad.py").read_text()


def test_cache_dir_must_stay_inside_the_project(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text(BAD)
    for value, message in (('"../elsewhere"', "outside the project"), ('""', "must not be empty")):
        (tmp_path / "npu-lint.toml").write_text(f"cache-dir = {value}\n")
        res = run("check", "bad.py", cwd=tmp_path)
        assert res.returncode == 2 and message in res.stderr, res.stderr
    (tmp_path / "npu-lint.toml").write_text('cache-dir = "~/npu-lint-test-cache"\n')
    home = tmp_path / "home"
    home.mkdir()
    res = subprocess.run(
        [sys.executable, "-m", "npu_lint", "check", "bad.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "HOME": str(home)},
        timeout=120,
    )
    assert res.returncode == 1 and (home / "npu-lint-test-cache").is_dir()


# -- no silent clean --------------------------------------------------------------------------------------


def test_nothing_linted_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "bad.py").write_text(BAD)
    (tmp_path / "npu-lint.toml").write_text('exclude = ["*"]\n')
    res = run("check", "--no-cache", "pkg/bad.py", cwd=tmp_path)  # named explicitly: linted
    assert res.returncode == 1
    (tmp_path / "npu-lint.toml").write_text('extend-exclude = ["pkg"]\n')
    res = run("check", "--no-cache", ".", cwd=tmp_path)
    assert res.returncode == 2 and "no Python files to lint" in res.stderr


def test_no_rule_selected_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text(BAD)
    (tmp_path / "npu-lint.toml").write_text('select = [""]\n')
    res = run("check", "--no-cache", "bad.py", cwd=tmp_path)
    assert res.returncode == 2 and "empty rule code in select" in res.stderr
    (tmp_path / "npu-lint.toml").write_text('select = ["NPU101"]\nignore = ["NPU1"]\n')
    res = run("check", "--no-cache", "bad.py", cwd=tmp_path)
    assert res.returncode == 2 and "no rule is selected" in res.stderr


def test_unreadable_directory_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # noqa: ANN001
    from npu_lint.cli import main

    (tmp_path / "bad.py").write_text(BAD)
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "x.py").write_text(BAD)
    real = os.scandir

    def scandir(path=".", *args, **kwargs):  # noqa: ANN001, ANN202 - what EACCES looks like, even to root
        if os.fspath(path).rstrip("/").endswith("locked"):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.chdir(tmp_path)
    code = main(["check", "--no-cache", "--jobs", "1", "."])
    err = capsys.readouterr().err
    assert code == 2 and "locked: cannot read directory: Permission denied" in err


# -- special files, process hygiene -------------------------------------------------------------------------


def test_fifo_named_py_does_not_hang(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text(BAD)
    os.mkfifo(tmp_path / "pipe.py")
    res = run("check", "--no-cache", ".", cwd=tmp_path, timeout=60)
    assert res.returncode == 2 and "pipe.py: not a regular file" in res.stderr
    assert "NPU101" in res.stdout
    res = run("check", "--no-cache", "pipe.py", cwd=tmp_path, timeout=60)
    assert res.returncode == 2 and "not a regular file" in res.stderr


def test_pool_workers_die_with_the_parent(tmp_path: Path) -> None:
    for i in range(60):
        (tmp_path / f"m{i}.py").write_text(BAD + "x = 1\n" * 3000)
    proc = subprocess.Popen(
        [sys.executable, "-m", "npu_lint", "check", "--no-cache", "--jobs", "2", "."],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    children: set[int] = set()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not children and proc.poll() is None:
        try:
            children = {
                int(p) for p in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
            }
        except OSError:
            break
        time.sleep(0.05)
    if not children:
        proc.kill()
        proc.wait()
    assert children, "no worker of the run was observed (it lints 60 files of 3,000 lines with --jobs 2)"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    alive = set(children)
    while alive and time.monotonic() < deadline:
        alive = {c for c in alive if Path(f"/proc/{c}").exists() and "Z" not in _state(c)}
        time.sleep(0.1)
    for orphan in alive:  # do not leave them behind when the test fails
        os.kill(orphan, signal.SIGKILL)
    assert not alive
    assert proc.stdout is not None and proc.stdout.read() is not None  # EOF: nobody holds the pipe


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return "Z"


# -- configuration, audit -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,message",
    [
        ('tool = "npu-lint"\n', "`tool` must be a table"),
        ("[tool]\nnpu-lint = 3\n", "[tool.npu-lint] must be a table"),
        ("x = " + "[" * 100_000 + "]" * 100_000 + "\n[tool.npu-lint]\n", "malformed TOML"),
    ],
)
def test_pathological_config_is_a_config_error(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "bad.py").write_text(BAD)
    (tmp_path / "pyproject.toml").write_text(text)
    res = run("check", "--no-cache", "bad.py", cwd=tmp_path)
    assert res.returncode == 2 and message in res.stderr and "internal error" not in res.stderr


def test_audit_of_root_is_a_clean_error(tmp_path: Path) -> None:
    res = run("audit", "/", cwd=tmp_path)
    assert res.returncode == 2 and "not a model package" in res.stderr


def test_sigterm_during_a_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "m.py"
    target.write_text("x = 1\n")
    script = (
        "import os, sys, time\n"
        "import npu_lint.engine.write as w\n"
        "from npu_lint.cli import _exit_on_sigterm\n"
        "_exit_on_sigterm()\n"
        "def slow(a, b):\n"
        "    print('ready', flush=True)\n"
        "    time.sleep(60)\n"
        "os.replace = slow\n"
        "try:\n"
        f"    w.write_atomic({str(target)!r}, 'x = 2\\n', 'utf-8')\n"
        "except SystemExit as exc:\n"
        "    sys.exit(exc.code)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # the write is in progress
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 143
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.py"]
    assert target.read_text() == "x = 1\n"


def test_audit_base_does_not_run_the_repository_config(tmp_path: Path) -> None:
    """`audit --base` runs git in the tree: a `core.fsmonitor` command in the repository's config must not run."""
    assert shutil.which("git"), "git is not installed"
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURES, repo)
    git = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "init"], check=True)
    marker = tmp_path / "MARKER"
    subprocess.run([*git, "config", "core.fsmonitor", f"touch {marker}; false"], check=True)
    (repo / WIDGET / "__init__.py").write_text((repo / WIDGET / "__init__.py").read_text() + "\n")
    res = run("audit", str(WIDGET), "--base", "HEAD", cwd=repo)
    assert res.returncode in (0, 1), res.stderr
    assert not marker.exists()


def test_output_file_dev_stdout_is_written_through(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text(BAD)
    res = run("check", "--no-cache", "bad.py", "-o", "/dev/stdout", cwd=tmp_path)
    assert res.returncode == 1 and "NPU101" in res.stdout
    assert Path("/dev/stdout").is_symlink()


def test_cli_fix_runs_during_an_editor_save_loop(tmp_path: Path) -> None:
    """End to end: `npu-lint check --fix` started again and again while an editor saves every 20 ms; every
    save is kept or fixed, never replaced by the fix of an older save."""
    path = tmp_path / "m.py"
    path.write_text(BAD + "# save 0\n")
    stop = threading.Event()
    lost: list[tuple[int, int]] = []
    last = [0]

    def editor() -> None:
        n = 0
        while not stop.is_set():
            seen = int(path.read_text().rsplit("# save ", 1)[1].split()[0])
            if seen != n:
                lost.append((n, seen))
            n += 1
            path.write_text(BAD + f"# save {n}\n")
            last[0] = n
            time.sleep(0.02)

    thread = threading.Thread(target=editor)
    thread.start()
    try:
        for _ in range(4):
            res = run(
                "check", "--no-cache", "--fix", "--unsafe-fixes", "--select", "NPU101", "m.py", cwd=tmp_path
            )
            assert res.returncode in (0, 1, 2), res.stderr
            assert "internal error" not in res.stderr
    finally:
        stop.set()
        thread.join()
    assert not lost, lost
    assert path.read_text().endswith(f"# save {last[0]}\n")


def test_symlinked_default_cache_directory_is_not_used(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text(BAD)
    outside = tmp_path / "outside"
    outside.mkdir()
    project = tmp_path / "project"
    project.mkdir()
    (project / "bad.py").write_text(BAD)
    (project / ".npu_lint_cache").symlink_to(outside, target_is_directory=True)
    res = run("check", "bad.py", cwd=project)
    assert res.returncode == 1 and "is a symbolic link: the cache is not used" in res.stderr
    assert not list(outside.iterdir())
