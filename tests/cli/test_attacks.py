"""Reliability, second round (issue 22): the attacks of an independent adversary, one test each.

bench/robustness.py re-runs them as a table (bench/accuracy/robustness.md)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.diagnostics import Diagnostic
from npu_lint.engine import lint_paths
from npu_lint.engine.adopt import add_noqa

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "packaging" / "tree"
WIDGET = Path("veomni/models/transformers/widget")
BAD = "import torch\n\n\ndef f(model):\n    return model.cuda()\n"


def run(*args: str, cwd: Path, timeout: float = 120, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "npu_lint", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        errors="surrogateescape",
        env={**os.environ, "NO_COLOR": "1"},
        timeout=timeout,
        **kw,  # type: ignore[arg-type]
    )


def _one_line_error(res: subprocess.CompletedProcess[str]) -> None:
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr, res.stderr


# -- reads that bypassed the regular-file reader ---------------------------------------------------------------


def test_fifo_as_baseline_is_one_line_not_a_hang(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(BAD)
    os.mkfifo(tmp_path / "base.json")
    res = run("check", "--no-cache", "--baseline", "base.json", "m.py", cwd=tmp_path, timeout=60)
    _one_line_error(res)
    assert "not a regular file" in res.stderr


def test_fifo_spec_helper_and_dev_zero_in_the_tree_do_not_hang(tmp_path: Path) -> None:
    """A FIFO spec (patchgen.load_file), a FIFO helper (profile.scan_definitions, registry, imports) and a
    committed symlink to /dev/zero anywhere in the tree: check, --fix and audit finish."""
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES, tree)
    os.mkfifo(tree / WIDGET / "other_gpu_patch_gen_config.py")
    os.mkfifo(tree / "veomni" / "helper.py")
    (tree / "veomni" / "ops").mkdir(exist_ok=True)
    os.mkfifo(tree / "veomni" / "ops" / "kernels.py")
    (tree / "veomni" / "zero.py").symlink_to("/dev/zero")
    (tree / WIDGET / "zero_gpu_patch_gen_config.py").symlink_to("/dev/zero")
    for args in (("check", "--no-cache", "."), ("check", "--no-cache", "--fix", "--diff", ".")):
        res = run(*args, cwd=tree, timeout=90)
        assert res.returncode in (0, 1, 2) and "Traceback" not in res.stderr, res.stderr
    res = run("audit", str(WIDGET), cwd=tree, timeout=90)
    assert "Traceback" not in res.stderr


def test_one_reader_refuses_fifos_devices_and_huge_files(tmp_path: Path) -> None:
    from npu_lint.core import safeio

    os.mkfifo(tmp_path / "f")
    for path in (tmp_path / "f", Path("/dev/zero"), tmp_path):
        with pytest.raises(OSError):
            safeio.read_text(path)
    (tmp_path / "big").write_bytes(b"x" * 2000)
    with pytest.raises(OSError, match="larger than"):
        safeio.read_regular(tmp_path / "big", limit=1000)
    (tmp_path / "deep.json").write_text("[" * 200000 + "]" * 200000)
    with pytest.raises(ValueError, match="nested too deeply"):
        safeio.read_json(tmp_path / "deep.json")


def test_standard_input_is_bounded(tmp_path: Path) -> None:
    with open("/dev/zero", "rb") as zero:
        res = run("check", "--stdin-filename", "m.py", cwd=tmp_path, stdin=zero, timeout=60)
    _one_line_error(res)
    assert "standard input: larger than" in res.stderr


# -- --add-noqa is as careful as --fix -------------------------------------------------------------------------


def _diags(path: Path, settings: Settings) -> tuple[list[Diagnostic], dict[str, str]]:
    results = lint_paths([str(path)], ["NPU101"], settings, None, jobs=1)
    return [d for r in results for d in r.diagnostics], {r.path: r.digest for r in results}


def test_add_noqa_never_writes_over_a_later_save(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(BAD)
    diags, digests = _diags(path, Settings(root=str(tmp_path)))
    saved = "# a line the user just inserted\n" + BAD
    path.write_text(saved)  # the editor saves between the lint and --add-noqa
    result = add_noqa(diags, digests=digests, roots=[str(tmp_path)])
    assert path.read_text() == saved and result.added == 0 and not result.files
    assert any("changed since it was linted" in s for s in result.skipped)


def test_add_noqa_never_edits_through_a_symlink_out_of_the_tree(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "spec.py").write_text(BAD)
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "spec.py").symlink_to(outside / "spec.py")
    diags, digests = _diags(tree / "spec.py", Settings(root=str(tree)))
    assert diags
    result = add_noqa(diags, digests=digests, roots=[str(tree)])
    assert (outside / "spec.py").read_text() == BAD and result.added == 0
    assert any("outside the linted tree" in s for s in result.skipped)


def test_add_noqa_keeps_mixed_line_endings(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_bytes(b"import torch\r\n\ndef f(m, n):\r\n    a = m.cuda()\n    return n.cuda()\r\n")
    res = run("check", "--no-cache", "--add-noqa", "m.py", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert path.read_bytes() == (
        b"import torch\r\n\ndef f(m, n):\r\n    a = m.cuda()  # noqa: NPU101\n    return n.cuda()  # noqa: NPU101\r\n"
    )
    assert "Added 2 noqa directives." in res.stdout


def test_add_noqa_one_unwritable_file_does_not_stop_the_run(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    from npu_lint.engine import write as write_module

    for name in ("a.py", "b.py", "c.py"):
        (tmp_path / name).write_text(BAD)
    settings = Settings(root=str(tmp_path))
    results = lint_paths(
        [str(tmp_path / n) for n in ("a.py", "b.py", "c.py")], ["NPU101"], settings, None, jobs=1
    )
    real = write_module.write_atomic

    def flaky(path: str, *args: object, **kw: object) -> None:
        if path.endswith("b.py"):
            raise PermissionError(13, "Permission denied", path)
        real(path, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr("npu_lint.engine.adopt.write_atomic", flaky)
    result = add_noqa(
        [d for r in results for d in r.diagnostics], {r.path: r.digest for r in results}, [str(tmp_path)]
    )
    assert result.added == 2 and len(result.files) == 2  # the count counts written files only
    assert len(result.errors) == 1 and "b.py: cannot write: Permission denied" in result.errors[0]
    assert "noqa" in (tmp_path / "c.py").read_text() and "noqa" not in (tmp_path / "b.py").read_text()


def test_add_noqa_twice_changes_nothing_and_ignores_noqa_in_strings(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text('import torch\n\n\ndef f(m):\n    return m.cuda(), "# noqa"\n')
    assert run("check", "--no-cache", "--add-noqa", "m.py", cwd=tmp_path).returncode == 0
    once = path.read_text()
    assert once.endswith('"# noqa"  # noqa: NPU101\n')
    assert run("check", "--no-cache", "--add-noqa", "m.py", cwd=tmp_path).returncode == 0
    assert path.read_text() == once


# -- code injection through a created file ---------------------------------------------------------------------


def test_model_directory_with_quotes_never_becomes_code(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES, tree)
    evil = 'w"""+__import__("os").system("touch PWNED")+"""'
    target = tree / WIDGET.parent / evil
    (tree / WIDGET).rename(target)
    res = run("check", "--no-cache", "--fix", "--unsafe-fixes", ".", cwd=tree, timeout=120)
    assert "Traceback" not in res.stderr, res.stderr
    for spec in tree.rglob("*_npu_patch_gen_config.py"):
        text = spec.read_text()
        assert "system(" not in text, text
        compile(text, str(spec), "exec")
    assert not (tree / "PWNED").exists()


def test_npu_spec_literals_cannot_end_their_string() -> None:
    from npu_lint.fixers.npu_spec import _quote, _unsafe_names

    for value in ('a"b', "a\\", 'x"\n__import__("os")\n"', "\udcff\x1b[2J", "é\u2028"):
        literal = _quote(value)
        assert eval(literal) == value  # noqa: S307 - the literal is what a created spec would hold
    assert "not a Python identifier" in _unsafe_names('w"""x', "w_gpu_patch_gen_config", None, None, "c")
    assert "dotted Python name" in _unsafe_names("w", "w_gpu", 'a."b', None, "c")
    assert "docstring" in _unsafe_names("w", "w_gpu", "a.b", "a.c", 'patchgen """; x')
    assert _unsafe_names("w", "w_gpu", "a.b", "a.c", "python -m patchgen a.b -o a/generated --diff -v") == ""


# -- usage slips that destroy work -----------------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--write-baseline", "-o"])
def test_output_over_an_input_is_refused(tmp_path: Path, flag: str) -> None:
    (tmp_path / "m.py").write_text(BAD)
    res = run("check", "--no-cache", flag, "m.py", "m.py", cwd=tmp_path)
    _one_line_error(res)
    assert "refusing to replace it" in res.stderr
    assert (tmp_path / "m.py").read_text() == BAD
    (tmp_path / "link.py").symlink_to("m.py")
    _one_line_error(run("check", "--no-cache", flag, "link.py", ".", cwd=tmp_path))
    assert (tmp_path / "m.py").read_text() == BAD


@pytest.mark.parametrize("flag", ["--write-baseline", "-o"])
def test_output_to_a_hard_link_of_a_source_is_refused(tmp_path: Path, flag: str) -> None:
    """A report name that is another hard link of a linted source (found by an independent adversary)."""
    tree = tmp_path / "t"
    tree.mkdir()
    (tree / "a.py").write_text(BAD)
    os.link(tree / "a.py", tree / "hl.txt")
    res = run("check", "--no-cache", flag, "t/hl.txt", "t", cwd=tmp_path)
    _one_line_error(res)
    assert "refusing to replace it" in res.stderr
    assert (tree / "a.py").read_text() == BAD


def test_output_over_the_baseline_config_or_a_source_is_refused(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(BAD)
    (tmp_path / "other.py").write_text("x = 1\n")
    (tmp_path / "npu-lint.toml").write_text("")
    assert run("check", "--no-cache", "--write-baseline", "b.json", "m.py", cwd=tmp_path).returncode == 0
    baseline = (tmp_path / "b.json").read_text()
    for args in (
        ("-o", "b.json", "--baseline", "b.json"),
        ("-o", "npu-lint.toml"),
        ("--write-baseline", "npu-lint.toml"),
        ("-o", "other.py"),  # not linted, still a source
    ):
        res = run("check", "--no-cache", *args, "m.py", cwd=tmp_path)
        _one_line_error(res)
        assert "refusing to replace it" in res.stderr, args
    assert (tmp_path / "b.json").read_text() == baseline and (tmp_path / "other.py").read_text() == "x = 1\n"
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES, tree)
    spec = next((tree / WIDGET).glob("*_gpu_patch_gen_config.py"))
    before = spec.read_text()
    res = run("audit", str(WIDGET), "-o", str(spec), cwd=tree)
    assert res.returncode == 2 and "refusing to replace it" in res.stderr and spec.read_text() == before


def test_cache_dir_dot_never_hides_the_repository_from_git(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "m.py").write_text(BAD)
    res = run("check", "--cache-dir", ".", "m.py", cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    assert not (tmp_path / ".gitignore").exists()
    status = subprocess.run(["git", "status", "--porcelain"], cwd=tmp_path, capture_output=True, text=True)
    assert "m.py" in status.stdout and "v0" not in status.stdout  # the entries' own directory is ignored
    assert list(tmp_path.glob("v*/.gitignore"))


def test_symlink_inside_the_cache_sends_no_write_outside(tmp_path: Path) -> None:
    from npu_lint import __version__

    outside = tmp_path / "outside"
    outside.mkdir()
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "m.py").write_text(BAD)
    cache = tree / ".npu_lint_cache"
    cache.mkdir()
    (cache / f"v{__version__}").symlink_to(outside)
    res = run("check", "m.py", cwd=tree)
    assert res.returncode == 1, res.stderr
    assert list(outside.iterdir()) == []


# -- argument injection into git -------------------------------------------------------------------------------


def test_audit_base_cannot_be_a_git_option(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES, tree)
    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    res = run("audit", str(WIDGET), f"--base=--output={victim}", cwd=tree)
    _one_line_error(res)
    assert "is not a revision" in res.stderr
    assert victim.read_text() == "keep me\n"


def test_audit_base_is_resolved_before_git_diff_sees_it(tmp_path: Path) -> None:
    from npu_lint.audit import changed_since, valid_revision

    assert not valid_revision("--output=x") and not valid_revision("a b") and valid_revision("HEAD~1")
    changed, problem = changed_since(tmp_path, "-x")
    assert changed is None and "not a revision" in problem


# -- silent success and false suppression ----------------------------------------------------------------------


def test_a_run_that_analysed_nothing_says_so(tmp_path: Path) -> None:
    (tmp_path / "latin.py").write_bytes(b"x = '\xff'\n")
    res = run("check", "--no-cache", "--select", "NPU101", "latin.py", cwd=tmp_path)
    _one_line_error(res)
    assert "not analysed" in res.stderr and "none of the 1 files could be analysed" in res.stderr
    assert "All checks passed" not in res.stdout


def test_noqa_in_a_string_or_docstring_suppresses_nothing(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        '"""Module.\n# npu-lint: noqa\n"""\nimport torch\n\n\ndef f(m):\n    return m.cuda(), "# noqa"\n'
    )
    res = run("check", "--no-cache", "m.py", cwd=tmp_path)
    assert res.returncode == 1 and "NPU101" in res.stdout
    (tmp_path / "m.py").write_text("# npu-lint: noqa\n" + BAD)
    assert run("check", "--no-cache", "m.py", cwd=tmp_path).returncode == 0  # a real comment still works


def test_spec_code_blocks_carry_line_noqa_but_never_a_file_directive() -> None:
    """In a patch spec, the code inside ``add_post_import_block(\"\"\"...\"\"\")`` is code (its comments count
    for its lines, where --add-noqa puts them); the spec's docstring is not (`# npu-lint: noqa` there is text)."""
    from npu_lint.engine.suppress import comments, file_suppression

    spec = (
        '"""Spec.\n# npu-lint: noqa\n"""\n'
        'config.add_post_import_block("""\nfrom x import y  # noqa: NPU201\n""")\n'
    )
    assert comments(spec, spec=True)[5] == "# noqa: NPU201"
    assert 5 not in comments(spec)
    assert file_suppression(spec, comments(spec)) is False


def test_fix_counts_only_written_files(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    from npu_lint.engine import fix_tree

    fixable = "import torch\n\n\ndef f(model, hidden_states: torch.Tensor):\n    return model.cuda()\n"
    (tmp_path / "m.py").write_text(fixable)
    settings = Settings(root=str(tmp_path))
    res = lint_paths([str(tmp_path / "m.py")], ["NPU101"], settings, None, jobs=1)

    def refuse(*args: object, **kw: object) -> None:
        raise PermissionError(13, "Permission denied", "m.py")

    monkeypatch.setattr("npu_lint.engine.fix.write_atomic", refuse)
    done = fix_tree(res[0].diagnostics, ["NPU101"], settings, None, unsafe=True)
    assert done.errors and not done.fixed_counts


# -- internal errors that must be one-line usage errors ---------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [
        "[" * 100000 + "]" * 100000,
        '{"npu-lint-baseline": 1, "findings": {"a": 1}}',
        '{"npu-lint-baseline": 1, "findings": [{"code": 1, "path": [], "fingerprint": {}}]}',
        '{"npu-lint-baseline": 1, "findings": [{"code": "A", "path": "b", "fingerprint": "c", "count": "x"}]}',
        '{"npu-lint-baseline": 1, "findings": [7]}',
        '{"npu-lint-baseline": 1, "findings": [{"code": "A", "path": "b", "fingerprint": "c", "count": -1}]}',
        '{"npu-lint-baseline": 1, "findings": [{"code": "A", "path": "b", "fingerprint": "c", "count": 0}]}',
        "\xff\xfe",
    ],
)
def test_malformed_baselines_are_one_line_errors(tmp_path: Path, content: str) -> None:
    (tmp_path / "m.py").write_text(BAD)
    (tmp_path / "b.json").write_text(content, encoding="latin-1")
    res = run("check", "--no-cache", "--baseline", "b.json", "m.py", cwd=tmp_path)
    _one_line_error(res)
    assert len(res.stderr.strip().splitlines()) <= 2, res.stderr


@pytest.mark.parametrize("pattern", ["!", "\\", "[z-a]", "[", "a[b.py", "x/[!a"])
def test_invalid_exclude_pattern_is_a_config_error(tmp_path: Path, pattern: str) -> None:
    (tmp_path / "m.py").write_text(BAD)
    (tmp_path / "npu-lint.toml").write_text(f"exclude = [{json.dumps(pattern)}]\n")
    res = run("check", "--no-cache", ".", cwd=tmp_path)
    _one_line_error(res)
    assert "invalid `exclude` pattern" in res.stderr


@pytest.mark.parametrize(
    "line",
    ['select = "NPU1"', 'exclude = "m.py"', 'per-file-ignores = {"m.py" = "NPU101"}', 'ignore = "NPU101"'],
)
def test_a_string_where_a_list_is_expected_is_a_config_error(tmp_path: Path, line: str) -> None:
    (tmp_path / "m.py").write_text(BAD)
    (tmp_path / "npu-lint.toml").write_text(line + "\n")
    res = run("check", "--no-cache", ".", cwd=tmp_path)
    _one_line_error(res)
    assert "must be a list of strings, got the string" in res.stderr


NON_UTF8 = os.fsdecode(b"bad\xff\x1b[31m.py")


@pytest.mark.parametrize("fmt", ["text", "concise", "json", "json-lines", "sarif", "github", "junit"])
def test_non_utf8_and_escape_file_names_in_every_format(tmp_path: Path, fmt: str) -> None:
    (tmp_path / NON_UTF8).write_text(BAD)
    res = run("check", "--no-cache", "--output-format", fmt, ".", cwd=tmp_path)
    assert res.returncode == 1, res.stderr
    assert (
        "\x1b" not in res.stdout and "\x1b" not in res.stderr
    )  # no raw escape sequence reaches the terminal
    if fmt == "sarif":
        log = json.loads(res.stdout)
        uri = log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
        assert uri == "bad%FF%1B%5B31m.py"
    elif fmt == "json":
        assert json.loads(res.stdout)[0]["code"] == "NPU101"


def test_escape_sequences_in_a_model_directory_never_reach_the_terminal(tmp_path: Path) -> None:
    """A directory name appears in messages (NPU501), the created-file and next-step lines: all escaped."""
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES, tree)
    (tree / WIDGET).rename(tree / WIDGET.parent / "w\x1b]0;owned\x07")
    for args in (("check", "--no-cache", "."), ("check", "--no-cache", "--fix", "--unsafe-fixes", ".")):
        for fmt in ("text", "concise", "github"):
            res = run(*args, "--output-format", fmt, cwd=tree)
            assert "\x1b" not in res.stdout + res.stderr and "\x07" not in res.stdout + res.stderr, (
                args,
                fmt,
            )


def test_lone_surrogate_in_an_editor_buffer_keeps_the_finding(tmp_path: Path) -> None:
    from npu_lint.core.source import SourceFile
    from npu_lint.engine import lint_source

    src = SourceFile.from_text(
        str(tmp_path / "m.py"), BAD.replace("import torch", 's = "\udcff"\nimport torch')
    )
    diags = lint_source(src, ["NPU101", "NPU001"], Settings(root=str(tmp_path)), None)
    assert [(d.code, d.line, d.col) for d in diags] == [("NPU101", 6, 17)]


# -- lower -----------------------------------------------------------------------------------------------------


def test_ancestor_configuration_is_named(tmp_path: Path) -> None:
    (tmp_path / "npu-lint.toml").write_text('ignore = ["NPU101"]\n')
    project = tmp_path / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    (project / "m.py").write_text(BAD)
    res = run("check", "--no-cache", "m.py", cwd=project)
    assert (
        f"using configuration {tmp_path / 'npu-lint.toml'} (found above the working directory)" in res.stderr
    )
    res = run("check", "--no-cache", "-v", "m.py", cwd=tmp_path)
    assert "using configuration" in res.stderr


def test_a_read_only_run_deletes_no_user_file(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(BAD)
    mine = tmp_path / ".m.py.npu-lint-999999.0badf00d.tmp"  # the pattern, no such process
    mine.write_text("my notes\n")
    for args in (("check", "--no-cache", "."), ("check", "--no-cache", "--diff", "."), ("audit", ".")):
        run(*args, cwd=tmp_path)
    assert mine.read_text() == "my notes\n"


def test_server_exit_without_shutdown_is_exit_code_1(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "npu_lint", "server"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=tmp_path,
    )

    def frame(payload: dict) -> bytes:
        body = json.dumps(payload).encode()
        return f"Content-Length: {len(body)}\r\n\r\n".encode() + body

    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"processId": None, "capabilities": {}},
    }
    assert proc.stdin is not None
    proc.stdin.write(frame(init) + frame({"jsonrpc": "2.0", "method": "exit"}))
    proc.stdin.flush()
    threading.Thread(target=proc.stdout.read, daemon=True).start()  # type: ignore[union-attr]
    assert proc.wait(60) == 1


def test_server_survives_an_absurd_content_length(tmp_path: Path) -> None:
    import importlib.util

    raw = Path(__file__).resolve().parents[2] / "bench" / "lsp_raw.py"
    spec = importlib.util.spec_from_file_location("lsp_raw", raw)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    (tmp_path / "npu-lint.toml").write_text("")
    client = module.RawClient(tmp_path)
    try:
        client.initialize()
        client.send_bytes(b"Content-Length: 99999999999999\r\n\r\n{}")
        uri = (tmp_path / "m.py").as_uri()
        client.open(uri, BAD)
        assert any(d["code"] == "NPU101" for d in client.diagnostics_for(uri))
        assert client.proc.poll() is None
    finally:
        client.close()


def test_server_with_an_invalid_exclude_still_publishes(tmp_path: Path) -> None:
    import importlib.util

    raw = Path(__file__).resolve().parents[2] / "bench" / "lsp_raw.py"
    spec = importlib.util.spec_from_file_location("lsp_raw", raw)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    (tmp_path / "npu-lint.toml").write_text('exclude = ["[z-a]"]\n')
    client = module.RawClient(tmp_path)
    try:
        client.initialize()
        uri = (tmp_path / "m.py").as_uri()
        client.open(uri, BAD)
        shown: list[str] = []

        def published(m: dict) -> bool:
            if m.get("method") == "window/showMessage":
                shown.append(m["params"]["message"])
            return m.get("method") == "textDocument/publishDiagnostics" and m["params"]["uri"] == uri

        assert any(d["code"] == "NPU101" for d in client.wait(published)["params"]["diagnostics"])
        assert any("invalid `exclude` pattern" in s for s in shown), shown
    finally:
        client.close()


# -- the child-process runner (verify, --live-registry) --------------------------------------------------------


def _run_child(code: str, timeout: float = 30, **kw: object):  # noqa: ANN202
    from npu_lint.core.process import run_untrusted

    return run_untrusted([sys.executable, "-c", code], cwd="/", timeout=timeout, python=sys.executable, **kw)


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    return "State:\tZ" in state


def test_a_timeout_kills_the_grandchildren_too() -> None:
    code = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    start = time.monotonic()
    outcome = _run_child(code, timeout=3)
    assert outcome.timed_out and time.monotonic() - start < 30
    grandchild = int(outcome.stdout.split()[0])
    deadline = time.monotonic() + 10
    while not _gone(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(grandchild)


def test_a_grandchild_left_running_is_killed_when_the_child_exits() -> None:
    code = (
        "import subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], stdout=subprocess.DEVNULL)\n"
        "print(p.pid, flush=True)\n"
    )
    start = time.monotonic()
    outcome = _run_child(code, timeout=60)
    assert not outcome.timed_out and time.monotonic() - start < 30
    grandchild = int(outcome.stdout.split()[0])
    deadline = time.monotonic() + 10
    while not _gone(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(grandchild)


_SETSID_ESCAPE = (
    "import os, sys, time\n"
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    os.setsid()\n"  # leaves the child's process group and session
    "    if os.fork():\n"
    "        os._exit(0)\n"  # a double fork: the grandchild's grandchild is orphaned at once
    "    print(os.getpid(), flush=True)\n"
    "    time.sleep(120)\n"
    "    os._exit(0)\n"
    "time.sleep(0.5)\n"
)


def test_a_descendant_that_left_the_group_is_killed_too() -> None:
    start = time.monotonic()
    outcome = _run_child(_SETSID_ESCAPE, timeout=60)
    assert not outcome.timed_out and time.monotonic() - start < 30  # its open pipes did not hold the run
    escaped = int(outcome.stdout.split()[0])
    assert _gone(escaped)  # killed and reaped before run_untrusted returned


def test_the_migrate_runner_kills_a_descendant_that_left_the_group(tmp_path: Path) -> None:
    from npu_lint.migrate.plan import Run
    from npu_lint.migrate.steps import _python_child

    (tmp_path / "stage").mkdir()
    run = Run(tmp_path, tmp_path / "stage", [], False, sys.executable, 60.0)
    start = time.monotonic()
    proc = _python_child(run, ["-c", _SETSID_ESCAPE])
    assert proc.returncode == 0 and time.monotonic() - start < 30
    assert _gone(int(proc.stdout.split()[0]))


def test_the_child_sees_a_minimal_environment(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("NPU_LINT_TEST_SECRET", "hunter2")
    code = (
        "import os, sys\n"
        "from npu_lint.core.process import child_read_key, child_send\n"
        "key, _ = child_read_key()\n"
        "child_send(key, dict(os.environ))\n"
    )
    repo = str(Path(__file__).resolve().parents[2])
    outcome = _run_child(code, extra_env={"PYTHONPATH": repo})
    env = outcome.result
    assert isinstance(env, dict), outcome.result_problem + outcome.stderr
    assert "NPU_LINT_TEST_SECRET" not in env and env["HOME"] != os.environ.get("HOME")
    assert set(env) <= {
        "PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "PYTHONIOENCODING", "PYTHONDONTWRITEBYTECODE",
        "OMP_NUM_THREADS", "TOKENIZERS_PARALLELISM", "PYTHONPATH", "NPU_LINT_RESULT_FD", "LC_CTYPE",
    }  # fmt: skip


def test_code_under_test_cannot_forge_the_verdict() -> None:
    """The verdict printed, or written on the result pipe without the key, is not believed."""
    code = (
        "import os, json\n"
        "print(json.dumps({'status': 'pass'}))\n"
        "fd = int(os.environ['NPU_LINT_RESULT_FD'])\n"
        "os.write(fd, json.dumps({'payload': json.dumps({'status': 'pass'}), 'mac': '0' * 64}).encode())\n"
    )
    outcome = _run_child(code)
    assert outcome.result is None and "not authenticated" in outcome.result_problem


def test_verify_runner_reports_a_forged_verdict_as_a_failure(tmp_path: Path) -> None:
    """run_child on a 'check' whose interpreter is a script that forges the answer: fail, never pass."""
    from npu_lint.verify.runner import run_child

    fake = tmp_path / "python"
    fake.write_text(
        "#!/bin/sh\n"
        f"exec {sys.executable} -c \"import os, json; os.write(int(os.environ['NPU_LINT_RESULT_FD']), "
        "json.dumps({'payload': json.dumps({'status': 'pass'}), 'mac': 'f' * 64}).encode())\"\n"
    )
    fake.chmod(0o755)
    result = run_child({"check": "pin"}, str(fake), 30, tmp_path)
    assert result.status == "fail"
    assert "no trustworthy verdict" in result.findings[0]["what"]


def test_verify_output_never_replaces_a_symlink_or_fifo(tmp_path: Path) -> None:
    from npu_lint.verify.cli import _write

    source = tmp_path / "modeling.py"
    source.write_text("x = 1\n")
    with pytest.raises(OSError, match="refusing to replace it"):
        _write(str(source), "report\n")
    assert source.read_text() == "x = 1\n"

    real = tmp_path / "real.md"
    real.write_text("old")
    link = tmp_path / "link.md"
    link.symlink_to(real)
    _write(str(link), "report\n")
    assert link.is_symlink() and real.read_text() == "report\n"
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    _write(str(fifo), "report\n")
    reader.join(30)
    assert fifo.is_fifo() and got == [b"report\n"]


def test_a_tree_module_cannot_shadow_what_authenticates_the_verdict(tmp_path: Path) -> None:
    """--live-registry puts the tree on sys.path only after the key is read and hmac / json are imported: a
    tree's `hmac.py` never sees the key."""
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURES, tree)
    marker = tmp_path / "leaked"
    for name in ("hmac", "json", "hashlib"):
        (tree / f"{name}.py").write_text(f"open({str(marker)!r}, 'a').write({name!r})\n")
    run("check", "--no-cache", "--live-registry", "veomni", cwd=tree)
    assert not marker.exists()


def test_repeated_select_and_ignore_accumulate(tmp_path: Path) -> None:
    """``--select A --select B`` selects both, as ruff does (the last one alone hid findings: an independent
    adversary, round 2)."""
    (tmp_path / "a.py").write_text('import torch\nx = torch.ones(2).cuda()\ny = torch.device("cuda")\n')
    args = ("check", "--no-cache", "--output-format", "json", "a.py")
    res = run(*args, "--select", "NPU101", "--select", "NPU102", cwd=tmp_path)
    assert sorted(d["code"] for d in json.loads(res.stdout)) == ["NPU101", "NPU102"]
    res = run(*args, "--ignore", "NPU101", "--ignore", "NPU102", "--select", "NPU1", cwd=tmp_path)
    assert [d["code"] for d in json.loads(res.stdout)] == []
