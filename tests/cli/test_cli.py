"""The CLI as a user runs it (subprocess), plus a few in-process checks of failure paths."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from npu_lint.cli import main
from tests.veomni_stub import make_veomni_stub

BAD = "import torch\n\n\ndef f(hidden_states: torch.Tensor, mask):\n    return hidden_states * mask.cuda()\n"
FIXED = "import torch\n\n\ndef f(hidden_states: torch.Tensor, mask):\n    return hidden_states * mask.to(hidden_states.device)\n"
CLEAN = "def f(x):\n    return x\n"


def run(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "npu_lint", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        input=stdin,
        env=env,
        timeout=120,
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "bad.py").write_text(BAD)
    (tmp_path / "pkg" / "clean.py").write_text(CLEAN)
    return tmp_path


def test_exit_codes_and_default_path(tree: Path) -> None:
    res = run("--no-cache", cwd=tree)
    assert res.returncode == 1, res.stderr
    assert "pkg/bad.py:5:33: NPU101" in res.stdout
    assert "Found 1 error." in res.stdout
    assert run("--no-cache", "pkg/clean.py", cwd=tree).returncode == 0
    assert run("--no-cache", "--exit-zero", cwd=tree).returncode == 0


def test_fix_without_subcommand_and_idempotence(tree: Path) -> None:
    res = run("--no-cache", "--fix", "pkg", cwd=tree)
    assert res.returncode == 0, res.stdout + res.stderr
    assert (tree / "pkg" / "bad.py").read_text() == FIXED
    again = run("--no-cache", "--fix", "pkg", cwd=tree)
    assert again.returncode == 0
    assert (tree / "pkg" / "bad.py").read_text() == FIXED
    assert "All checks passed!" in again.stdout


def test_diff_writes_nothing(tree: Path) -> None:
    res = run("--no-cache", "--diff", "pkg", cwd=tree)
    assert res.returncode == 1
    assert "-    return hidden_states * mask.cuda()" in res.stdout
    assert "+    return hidden_states * mask.to(hidden_states.device)" in res.stdout
    assert (tree / "pkg" / "bad.py").read_text() == BAD


def test_show_fixes_and_statistics(tree: Path) -> None:
    res = run("--no-cache", "--fix", "--show-fixes", "pkg", cwd=tree)
    assert "1 × NPU101" in res.stdout
    (tree / "pkg" / "bad.py").write_text(BAD)
    stats = run("--no-cache", "--statistics", "pkg", cwd=tree)
    assert stats.stdout.split() == ["1", "NPU101", "[*]", "cuda-call"]


def test_select_ignore_prefix_all_and_unknown(tree: Path) -> None:
    assert run("--no-cache", "--select", "NPU1", "pkg", cwd=tree).returncode == 1
    assert run("--no-cache", "--select", "ALL", "pkg", cwd=tree).returncode == 1
    assert run("--no-cache", "--ignore", "NPU101", "pkg", cwd=tree).returncode == 0
    assert (
        run("--no-cache", "--select", "NPU001", "--extend-select", "NPU101", "pkg", cwd=tree).returncode == 1
    )
    res = run("--no-cache", "--select", "NPU999", "pkg", cwd=tree)
    assert res.returncode == 2
    assert "NPU999" in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert "Traceback" not in res.stderr


def test_bad_flag_is_one_line(tree: Path) -> None:
    res = run("--no-such-flag", cwd=tree)
    assert res.returncode == 2
    assert len(res.stderr.strip().splitlines()) == 1


def test_output_formats_and_output_file(tree: Path) -> None:
    res = run("--no-cache", "--output-format", "json", "pkg", cwd=tree)
    data = json.loads(res.stdout)
    assert [d["code"] for d in data] == ["NPU101"]
    assert data[0]["location"] == {"row": 5, "column": 33}
    assert data[0]["fix"]["applicability"] == "safe"
    out = tree / "report.sarif"
    res = run("--no-cache", "--output-format", "sarif", "-o", str(out), "pkg", cwd=tree)
    assert res.returncode == 1 and res.stdout == ""
    assert json.loads(out.read_text())["version"] == "2.1.0"
    for fmt in ("concise", "json-lines", "github", "junit"):
        res = run("--no-cache", "--output-format", fmt, "pkg", cwd=tree)
        assert res.returncode == 1 and "NPU101" in res.stdout, fmt


def test_stdin_filename(tree: Path) -> None:
    res = run("--stdin-filename", "pkg/virtual.py", "-", cwd=tree, stdin=BAD)
    assert res.returncode == 1
    assert "pkg/virtual.py:5:33: NPU101" in res.stdout
    fixed = run("--fix", "--stdin-filename", "pkg/virtual.py", cwd=tree, stdin=BAD)
    assert fixed.stdout == FIXED
    assert fixed.returncode == 0


def test_noqa_line_and_file(tree: Path) -> None:
    path = tree / "pkg" / "bad.py"
    path.write_text(BAD.replace("mask.cuda()", "mask.cuda()  # noqa: NPU101"))
    assert run("--no-cache", "pkg", cwd=tree).returncode == 0
    path.write_text(BAD.replace("mask.cuda()", "mask.cuda()  # noqa: NPU102"))
    assert run("--no-cache", "pkg", cwd=tree).returncode == 1
    path.write_text(BAD.replace("mask.cuda()", "mask.cuda()  # noqa"))
    assert run("--no-cache", "pkg", cwd=tree).returncode == 0
    path.write_text("# npu-lint: noqa\n" + BAD)
    assert run("--no-cache", "pkg", cwd=tree).returncode == 0
    path.write_text("# npu-lint: noqa: NPU101\n" + BAD)
    assert run("--no-cache", "pkg", cwd=tree).returncode == 0
    # --fix honours noqa too
    path.write_text(BAD.replace("mask.cuda()", "mask.cuda()  # noqa: NPU101"))
    run("--no-cache", "--fix", "pkg", cwd=tree)
    assert "mask.cuda()" in path.read_text()


def test_pyproject_configuration(tree: Path) -> None:
    pyproject = tree / "pyproject.toml"
    pyproject.write_text('[tool.npu-lint]\nignore = ["NPU101"]\n')
    assert run("--no-cache", "pkg", cwd=tree).returncode == 0
    # the command line overrides the file
    assert run("--no-cache", "--select", "NPU101", "pkg", cwd=tree).returncode == 1
    pyproject.write_text('[tool.npu-lint]\nper-file-ignores = { "pkg/bad.py" = ["NPU1"] }\n')
    assert run("--no-cache", "pkg", cwd=tree).returncode == 0
    pyproject.write_text('[tool.npu-lint]\nextend-exclude = ["pkg/bad.py"]\n')
    assert run("--no-cache", ".", cwd=tree).returncode == 0
    # an explicitly named file is linted unless --force-exclude
    assert run("--no-cache", "pkg/bad.py", cwd=tree).returncode == 1
    assert run("--no-cache", "--force-exclude", "pkg/bad.py", cwd=tree).returncode == 0


@pytest.mark.parametrize(
    "content,needle",
    [
        ('[tool.npu-lint]\nselekt = ["NPU1"]\n', "selekt"),
        ('[tool.npu-lint]\nselect = ["NPU777"]\n', "NPU777"),
        ('[tool.npu-lint]\ntarget-api = "cuda"\n', "target-api"),
        ("[tool.npu-lint\nselect = 1\n", "malformed TOML"),
    ],
)
def test_bad_configuration(tree: Path, content: str, needle: str) -> None:
    (tree / "pyproject.toml").write_text(content)
    res = run("--no-cache", "pkg", cwd=tree)
    assert res.returncode == 2
    assert needle in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_npu_lint_toml_and_config_flag(tree: Path) -> None:
    (tree / "npu-lint.toml").write_text('ignore = ["NPU101"]\n')
    assert run("--no-cache", "pkg", cwd=tree).returncode == 0
    other = tree / "other.toml"
    other.write_text('select = ["NPU101"]\n')
    other_named = tree / "npu-lint-ci.toml"
    other_named.write_text('[tool.npu-lint]\nselect = ["NPU101"]\n')
    assert run("--no-cache", "--config", str(other_named), "pkg", cwd=tree).returncode == 1
    assert run("--no-cache", "--config", "missing.toml", "pkg", cwd=tree).returncode == 2


def test_cache_is_used_and_invalidated(tree: Path) -> None:
    cache = tree / "cachedir"
    first = run("--cache-dir", str(cache), "--output-format", "json", "pkg", cwd=tree)
    assert any(cache.rglob("*.json"))
    second = run("--cache-dir", str(cache), "--output-format", "json", "pkg", cwd=tree)
    assert first.stdout == second.stdout
    (tree / "pkg" / "bad.py").write_text(CLEAN)
    assert run("--cache-dir", str(cache), "pkg", cwd=tree).returncode == 0
    # a different selection must not reuse entries made under another configuration
    (tree / "pkg" / "bad.py").write_text(BAD)
    assert run("--cache-dir", str(cache), "--select", "NPU001", "pkg", cwd=tree).returncode == 0
    assert run("--cache-dir", str(cache), "pkg", cwd=tree).returncode == 1


def test_rule_command() -> None:
    res = run("rule", "NPU101", cwd=Path.cwd())
    assert res.returncode == 0
    assert res.stdout.startswith("# NPU101 `cuda-call`")
    assert "## Fix safety" in res.stdout
    assert run("rule", "--all", cwd=Path.cwd()).stdout.count("## Why") >= 2
    bad = run("rule", "NPU999", cwd=Path.cwd())
    assert bad.returncode == 2 and "NPU999" in bad.stderr


def test_version() -> None:
    res = run("--version", cwd=Path.cwd())
    assert res.returncode == 0 and res.stdout.startswith("npu-lint ")


def test_fix_keeps_bom_crlf_and_mode(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_bytes(b"\xef\xbb\xbf" + BAD.replace("\n", "\r\n").encode())
    path.chmod(0o755)
    res = run("--no-cache", "--fix", str(path), cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert path.read_bytes() == b"\xef\xbb\xbf" + FIXED.replace("\n", "\r\n").encode()
    assert stat.S_IMODE(path.stat().st_mode) == 0o755


def test_fix_keeps_declared_encoding(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    text = "# -*- coding: latin-1 -*-\n# café\n" + BAD
    path.write_bytes(text.encode("latin-1"))
    res = run("--no-cache", "--fix", str(path), cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert path.read_bytes() == ("# -*- coding: latin-1 -*-\n# café\n" + FIXED).encode("latin-1")


def test_fix_adds_import_once(tmp_path: Path) -> None:
    make_veomni_stub(tmp_path)  # a VeOmni checkout: the device helpers exist
    path = tmp_path / "m.py"
    path.write_text('"""doc"""\nimport torch\n\n\ndef f(a, b):\n    return a.cuda(), b.cuda()\n')
    run("--no-cache", "--fix", str(path), cwd=tmp_path)
    assert path.read_text() == (
        '"""doc"""\nimport torch\nfrom veomni.utils.device import get_device_type\n\n\n'
        "def f(a, b):\n    return a.to(get_device_type()), b.to(get_device_type())\n"
    )


def test_generated_files_are_never_fixed(tmp_path: Path) -> None:
    gen = tmp_path / "m" / "generated"
    gen.mkdir(parents=True)
    path = gen / "patched_modeling_m_gpu.py"
    path.write_text(BAD)
    res = run("--no-cache", "--fix", "--unsafe-fixes", str(tmp_path), cwd=tmp_path)
    assert res.returncode == 1
    assert path.read_text() == BAD
    assert "NPU101" in res.stdout


def test_unsafe_fixes_hidden_count(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text("def f(model, device):\n    return model.cuda(device)\n")
    res = run("--no-cache", str(path), cwd=tmp_path)
    assert "1 hidden fix can be enabled with the `--unsafe-fixes` option." in res.stdout
    run("--no-cache", "--fix", str(path), cwd=tmp_path)
    assert "model.cuda(device)" in path.read_text()
    run("--no-cache", "--fix", "--unsafe-fixes", str(path), cwd=tmp_path)
    assert "model.to(device)" in path.read_text()  # the requested device is kept


# -- in-process failure paths -------------------------------------------------------------------------


def test_unreadable_file_is_reported_and_others_linted(tree: Path, monkeypatch, capsys) -> None:
    import npu_lint.engine.lint as lint_module

    target = str(tree / "pkg" / "clean.py")
    real = lint_module.read_regular

    def read_regular(path, *args, **kwargs):  # noqa: ANN001, ANN202
        if str(path) == target:
            raise PermissionError(13, "Permission denied")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(lint_module, "read_regular", read_regular)
    monkeypatch.chdir(tree)
    code = main(["--no-cache", "--jobs", "1", str(tree / "pkg")])
    out = capsys.readouterr()
    assert code == 2
    assert "cannot read file: Permission denied" in out.err
    assert "NPU101" in out.out  # bad.py was still linted


def test_internal_error_is_one_line_unless_verbose(tree: Path, monkeypatch, capsys) -> None:
    import npu_lint.engine as engine

    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("kaboom")

    monkeypatch.setattr(engine, "lint_paths", boom)
    monkeypatch.chdir(tree)
    assert main(["--no-cache", "pkg"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "npu-lint: internal error: RuntimeError: kaboom"
    assert main(["--no-cache", "--verbose", "pkg"]) == 2
    assert "Traceback" in capsys.readouterr().err


def test_cache_invalidated_when_a_sibling_spec_changes(tmp_path: Path) -> None:
    """A generated file's findings carry origins read from the spec: editing only the spec must not
    leave the generated file's cached origins stale."""
    pkg = tmp_path / "veomni" / "models" / "transformers" / "m"
    (pkg / "generated").mkdir(parents=True)
    spec = pkg / "m_gpu_patch_gen_config.py"
    spec.write_text("x = 1\n")
    (pkg / "generated" / "patched_modeling_m_gpu.py").write_text(BAD)
    cache = tmp_path / "cache"

    def index() -> dict:
        (path,) = cache.rglob("index-*.json")
        return json.loads(path.read_bytes().partition(b"\n")[2])

    run("--cache-dir", str(cache), "--select", "NPU101", str(pkg), cwd=tmp_path)
    before = index()
    spec.write_text("x = 2  # changed\n")
    run("--cache-dir", str(cache), "--select", "NPU101", str(pkg), cwd=tmp_path)
    after = index()
    assert after["fp"] != before["fp"]  # new fingerprint: the package changed
    gen = str(pkg / "generated" / "patched_modeling_m_gpu.py")
    assert after["files"][gen]["key"] != before["files"][gen]["key"]  # the generated file was linted again
