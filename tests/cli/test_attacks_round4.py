"""Adversary round 4 (bench/accuracy/adversary-round4.md): each test reproduces one break (R4-B1..B14); all were
xfail(strict=True) until fixed on branch advfix4, and now must pass (the "Fixed" section names each mechanism)."""

from __future__ import annotations

import ast
import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.veomni_stub import make_veomni_stub

ROOT = Path(__file__).resolve().parents[2]
FIXABLE = "def h(x):\n    return x.cuda()\n"


def run(*args: str, cwd: Path, **kwargs: object) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "npu_lint", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        **kwargs,  # type: ignore[arg-type]
    )


def _generated_tree(tmp_path: Path) -> Path:
    """A VeOmni checkout with a model package whose generated/ holds a file without the banner."""
    make_veomni_stub(tmp_path)
    pkg = tmp_path / "veomni" / "models" / "transformers" / "toy"
    (pkg / "generated").mkdir(parents=True)
    for init in (tmp_path / "veomni" / "models", tmp_path / "veomni" / "models" / "transformers", pkg):
        (init / "__init__.py").write_text("")
    (pkg / "generated" / "extra.py").write_text(FIXABLE)
    return pkg


def test_generated_file_reached_through_a_symlinked_directory_is_not_edited(tmp_path: Path) -> None:
    pkg = _generated_tree(tmp_path)
    (pkg / "gen").symlink_to("generated", target_is_directory=True)
    run("check", "--no-cache", "--fix", str(pkg / "gen" / "extra.py"), cwd=tmp_path)
    assert (pkg / "generated" / "extra.py").read_text() == FIXABLE


def test_generated_file_named_relative_to_cwd_inside_generated_is_not_edited(tmp_path: Path) -> None:
    pkg = _generated_tree(tmp_path)
    run("check", "--no-cache", "--fix", "extra.py", cwd=pkg / "generated")
    assert (pkg / "generated" / "extra.py").read_text() == FIXABLE


def test_safe_fix_never_calls_a_parameter_or_local_that_shadows_the_helper(tmp_path: Path) -> None:
    make_veomni_stub(tmp_path)
    src = (
        "def load(get_device_type=None, **kwargs):\n"
        '    init_device = kwargs.pop("init_device", "cuda")\n'
        "    return init_device, get_device_type\n\n\n"
        "def load2(**kwargs):\n"
        '    get_device_type = kwargs.get("fn")\n'
        '    init_device = kwargs.pop("init_device", "cuda")\n'
        "    return init_device, get_device_type\n"
    )
    target = tmp_path / "veomni" / "loader.py"
    target.write_text(src)
    run("check", "--no-cache", "--fix", "veomni/loader.py", cwd=tmp_path)
    tree = ast.parse(target.read_text())
    for func in (n for n in tree.body if isinstance(n, ast.FunctionDef)):
        local = {a.arg for a in func.args.args + func.args.kwonlyargs} | {
            t.id
            for n in ast.walk(func)
            if isinstance(n, ast.Assign)
            for t in n.targets
            if isinstance(t, ast.Name)
        }
        calls = {
            n.func.id for n in ast.walk(func) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
        }
        assert not (calls & local), f"{func.name} now calls its own {sorted(calls & local)}"


def test_audit_base_runs_no_git_filter_configured_by_the_repository(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_veomni_stub(repo)
    pkg = repo / "veomni" / "models" / "transformers" / "toy"
    pkg.mkdir(parents=True)
    for init in (repo / "veomni" / "models", repo / "veomni" / "models" / "transformers", pkg):
        (init / "__init__.py").write_text("")
    (pkg / "modeling_toy.py").write_text(FIXABLE)

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)

    git("init", "-q")
    git("-c", "user.email=a@b", "-c", "user.name=a", "add", "-A")
    git("-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "base")
    marker = tmp_path / "pwned"
    git("config", "filter.evil.clean", f'sh -c "echo ran >> {marker}; cat"')
    (repo / ".gitattributes").write_text("*.py filter=evil\n")
    with (pkg / "modeling_toy.py").open("a") as fh:
        fh.write("# edited\n")
    run("audit", str(pkg), "--base", "HEAD", cwd=repo)
    assert not marker.exists(), "audit ran a command configured in the linted repository"


def test_closed_stdout_is_a_one_line_output_error_not_an_internal_error(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("import torch\n\n\ndef f(x):\n    return x.cuda()\n")
    closed = subprocess.run(
        f"exec {sys.executable} -m npu_lint check --no-cache m.py >&-",
        shell=True,
        cwd=tmp_path,
        capture_output=False,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,
    )
    assert closed.returncode == 2
    assert "internal error" not in closed.stderr


def test_closed_stdin_with_stdin_filename_is_a_one_line_error(tmp_path: Path) -> None:
    closed = subprocess.run(
        f"exec {sys.executable} -m npu_lint check --no-cache --stdin-filename m.py <&-",
        shell=True,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,
    )
    assert closed.returncode == 2
    assert "internal error" not in closed.stderr


def test_rule_doc_to_a_closed_stdout_does_not_exit_zero(tmp_path: Path) -> None:
    closed = subprocess.run(
        f"exec {sys.executable} -m npu_lint rule NPU101 >&-",
        shell=True,
        cwd=tmp_path,
        capture_output=False,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,
    )
    assert closed.returncode != 0


def test_path_longer_than_path_max_is_skipped_and_the_run_goes_on(tmp_path: Path) -> None:
    (tmp_path / "top.py").write_text("import torch\n\n\ndef f(x):\n    return x.cuda()\n")
    deep = tmp_path / "deep"
    deep.mkdir()
    fd = os.open(deep, os.O_RDONLY)
    try:
        for _ in range(300):  # 300 x 31 bytes: far beyond PATH_MAX (4096)
            os.mkdir("d" * 30, dir_fd=fd)
            new = os.open("d" * 30, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = new
        leaf = os.open("m.py", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(leaf, b"x = 1\n")
        os.close(leaf)
    finally:
        os.close(fd)
    res = run("check", "--no-cache", "--output-format", "concise", ".", cwd=tmp_path)
    assert "internal error" not in res.stderr
    assert "top.py:5:14: NPU101" in res.stdout


def test_config_naming_a_directory_says_it_is_not_a_file(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("x = 1\n")
    (tmp_path / "cfgdir").mkdir()
    res = run("check", "--no-cache", "--config", "cfgdir", "m.py", cwd=tmp_path)
    assert res.returncode == 2
    assert "not found" not in res.stderr


def test_utf16_file_is_not_reported_as_a_bad_encoding_declaration(tmp_path: Path) -> None:
    (tmp_path / "w.py").write_bytes("import torch\nx = 1\n".encode("utf-16"))
    res = run("check", "--no-cache", "--output-format", "concise", "w.py", cwd=tmp_path)
    assert "NPU001" in res.stdout
    assert "encoding declaration" not in res.stdout


def test_cache_dir_that_is_a_file_is_not_called_an_invalid_cache_entry(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text("x = 1\n")
    (tmp_path / "not_a_dir").write_text("mine\n")
    res = run("check", "--cache-dir", "not_a_dir", "m.py", cwd=tmp_path)
    assert (tmp_path / "not_a_dir").read_text() == "mine\n"
    assert "invalid cache entry" not in res.stderr


def test_lsp_reader_resyncs_when_a_body_is_only_a_prefix_of_the_next_header() -> None:
    from npu_lint.lsp.server import ResyncReader

    nxt = b'{"jsonrpc":"2.0","id":2,"method":"shutdown"}'
    stream = b"Content-Length: 5\r\n\r\n" + b"Content-Length: %d\r\n\r\n" % len(nxt) + nxt

    async def go() -> list[bytes]:
        inner = asyncio.StreamReader()
        inner.feed_data(stream)
        inner.feed_eof()
        reader = ResyncReader(inner)
        bodies = []
        for _ in range(2):
            length = None
            while True:
                line = await reader.readline()
                if not line:
                    return bodies
                if line.strip() == b"":
                    break
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if length is not None:
                bodies.append(await reader.readexactly(length))
        return bodies

    bodies = asyncio.run(go())
    assert nxt in bodies, f"the request after a body-less header was lost: {bodies!r}"


@pytest.mark.corpus
def test_verify_import_check_reports_the_timeout_it_was_given(tmp_path: Path) -> None:
    """End to end on a hanging model __init__: the report names --timeout (the budget of the whole check);
    the bound itself is asserted without a clock in the test below."""
    import shutil

    corpus = ROOT.parent / "shared" / "corpora" / "veomni-op-5d90dd16"
    tree = tmp_path / "tree"
    shutil.copytree(corpus, tree, ignore=shutil.ignore_patterns("__pycache__"))
    init = tree / "veomni" / "models_kernel" / "transformers" / "qwen3" / "__init__.py"
    init.write_text("import time as _t\n\n_t.sleep(1000)\n" + init.read_text())
    res = run(
        "verify", str(init.parent), "--checks", "import", "--timeout", "3", "--format", "json", cwd=tmp_path
    )
    assert res.returncode == 1
    assert "did not finish within 3 s" in res.stdout


def _fake_import_check(
    monkeypatch: pytest.MonkeyPatch, first: str, spent: float
) -> list[tuple[float, float]]:
    """run_check("import") with children replaced: the first child ``first``s ("hang" or "pass") after
    ``spent`` seconds of a fake clock; returns the (timeout, limit) each child was given."""
    from types import SimpleNamespace

    from npu_lint.verify import runner

    now = [100.0]
    calls: list[tuple[float, float]] = []

    def child(req: dict, python: str, timeout: float, cwd: Path, limit: float | None = None) -> object:
        calls.append((timeout, limit if limit is not None else timeout))
        if len(calls) == 1:
            now[0] += min(spent, timeout)
            if first == "hang":
                return runner._timed_out("import", min(spent, timeout), calls[-1][1])
        return runner.CheckResult("import", "pass", 0.0)

    monkeypatch.setattr(runner, "_clock", lambda: now[0])
    monkeypatch.setattr(runner, "run_child", child)
    monkeypatch.setattr(runner, "request", lambda *a, **k: {"check": "import"})
    pkg = SimpleNamespace(root=Path("."), registered=["ToyForCausalLM"])
    result = runner.run_check(pkg, "import", sys.executable, 5.0)  # type: ignore[arg-type]
    calls.append((result.status == "pass", result.findings[0]["what"] if result.findings else ""))  # type: ignore[arg-type]
    return calls


def test_verify_import_check_timeout_bounds_the_whole_check(monkeypatch: pytest.MonkeyPatch) -> None:
    # R4-B14: the import check runs two children; --timeout 5 is "seconds per check", not per child
    hang = _fake_import_check(monkeypatch, "hang", 1000.0)
    assert hang == [(5.0, 5.0), (False, "the check did not finish within 5 s")]  # no second child
    slow = _fake_import_check(monkeypatch, "pass", 3.0)
    assert slow == [(5.0, 5.0), (2.0, 5.0), (True, "")]  # the second child gets what the first left
    spent = _fake_import_check(monkeypatch, "pass", 5.0)
    assert spent == [(5.0, 5.0), (False, "the check did not finish within 5 s")]


def _raw_client_module():  # noqa: ANN202
    import importlib.util

    spec = importlib.util.spec_from_file_location("lsp_raw", ROOT / "bench" / "lsp_raw.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_lsp_offers_no_edit_to_a_generated_file_opened_through_a_symlinked_directory(tmp_path: Path) -> None:
    pkg = _generated_tree(tmp_path)
    (pkg / "gen").symlink_to("generated", target_is_directory=True)
    uri = (pkg / "gen" / "extra.py").as_uri()
    client = _raw_client_module().RawClient(tmp_path)
    client.initialize({"textDocument": {"diagnostic": {"dynamicRegistration": False}}})
    try:
        client.open(uri, FIXABLE)
        reply = client.request(
            "textDocument/codeAction",
            {
                "textDocument": {"uri": uri},
                "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}},
                "context": {"diagnostics": [], "only": ["source.fixAll"]},
            },
        )
    finally:
        client.close()
    edits = [a for a in reply.get("result") or [] if a.get("edit")]
    assert not edits, f"fix-all edits a file under generated/: {edits!r}"
