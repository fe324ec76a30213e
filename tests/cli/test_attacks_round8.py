"""Round-8 attacks (bench/accuracy/adversary-round8.md): each test fails without the fix it names."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from npu_lint.cli import main

REPO = Path(__file__).resolve().parents[2]
CUDA_MODULE = "import torch\n\n\ndef g(x):\n    return x.cuda()\n"


def _veomni_tree(root: Path, device_py: str) -> Path:
    """A small VeOmni tree whose `veomni/utils/device.py` is ``device_py``; returns a model file with `.cuda()`."""
    files = {
        "pyproject.toml": "[project]\nname = 'veomni'\n",
        "veomni/__init__.py": "",
        "veomni/utils/__init__.py": "",
        "veomni/utils/device.py": device_py,
        "veomni/ops/__init__.py": "",
        "veomni/models/__init__.py": "",
        "veomni/models/transformers/__init__.py": "",
        "veomni/models/transformers/foo/__init__.py": "",
        "veomni/models/transformers/foo/modeling_foo.py": CUDA_MODULE,
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root / "veomni/models/transformers/foo/modeling_foo.py"


def _cli(*argv: str, cwd: Path, env: dict[str, str] | None = None, stdin: bytes | None = None):
    full = dict(os.environ)
    full["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [full.get("PYTHONPATH")])])
    full.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "npu_lint", *argv],
        cwd=cwd,
        env=full,
        input=stdin,
        capture_output=True,
        timeout=300,
    )


# -- A8-01: a ruff that never answers ------------------------------------------------------------------------


def test_a8_01_a_blocking_ruff_configuration_costs_one_wait_not_one_per_fixed_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`[tool.ruff] extend = "fifo.toml"` (a FIFO): ruff blocks reading it, and `--fix` waited 30 s in
    `ruff format --range` for every fixed file (3 files: 92 s; `--diff --unsafe-fixes` on the VeomniOp tree:
    2 min for its four NPU specs). ruff is now not asked again under a configuration where it stalled."""
    from npu_lint.core import tools

    monkeypatch.setattr(tools, "RUFF_WAIT", 1.0, raising=False)
    monkeypatch.setattr(tools, "_STALLED", {}, raising=False)
    os.mkfifo(tmp_path / "fifo.toml")
    (tmp_path / "pyproject.toml").write_text('[tool.ruff]\nextend = "fifo.toml"\n', encoding="utf-8")
    for name in ("a.py", "b.py", "c.py", "d.py"):
        (tmp_path / name).write_text(CUDA_MODULE, encoding="utf-8")
    calls: list[list[str]] = []
    real = tools.run_tool

    def counting(argv, stdin, timeout=30):  # type: ignore[no-untyped-def]
        calls.append(list(argv))
        return real(argv, stdin)

    monkeypatch.setattr(tools, "run_tool", counting)
    monkeypatch.chdir(tmp_path)
    main(["check", "--no-cache", "--fix", "."])
    err = capsys.readouterr().err
    assert len(calls) == 1, calls  # the first stall stops the others (no timing asserted: one wait, not four)
    assert "ruff did not answer" in err
    assert "x.to(" in (tmp_path / "d.py").read_text(encoding="utf-8")  # still fixed, left unformatted


# -- A8-02: form feeds shift the range sent to ruff ------------------------------------------------------------


def test_a8_02_form_feed_lines_do_not_make_the_fix_reformat_an_unrelated_statement(tmp_path: Path) -> None:
    """A file with `^L` page-break lines (as in old GNU-style code): `touched_lines` and `ruff_format_range`
    counted lines with `str.splitlines`, which also breaks at form feeds, so `ruff format --range` got the range
    of a statement two lines further down and reformatted the user's untouched `w = [1,2,   3]`."""
    (tmp_path / "pyproject.toml").write_text("[tool.ruff]\nline-length = 100\n", encoding="utf-8")
    path = tmp_path / "m.py"
    path.write_text(
        "import torch\n#\x0c\n#\x0c\n\n\ndef g(x):\n    y = x.cuda()\n    z = 1\n    w = [1,2,   3]\n"
        "    return y, z, w\n",
        encoding="utf-8",
    )
    main(["check", "--no-cache", "--fix", str(path)])
    text = path.read_text(encoding="utf-8")
    assert "x.to(" in text
    assert "    w = [1,2,   3]\n" in text  # the user's own formatting, never touched


def test_a8_02_touched_lines_count_lines_as_ruff_does() -> None:
    from npu_lint.engine.format import touched_lines

    before = "a = 1\n#\x0c\nb = 2\nc = 3\n"
    after = "a = 1\n#\x0c\nb = 20\nc = 3\n"
    assert touched_lines(before, after) == [(3, 3)]


# -- A8-03: a fix imports a name the tree binds only for type checkers ----------------------------------------


@pytest.mark.parametrize(
    "device_py",
    [
        pytest.param(
            "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n\n    def get_device_type() -> str: ...\n",
            id="type-checking",
        ),
        pytest.param(
            "import typing\n\nif typing.TYPE_CHECKING:\n\n    def get_device_type() -> str: ...\n",
            id="typing-dot-type-checking",
        ),
        pytest.param("def get_device_type():\n    return 'cpu'\n\n\ndel get_device_type\n", id="deleted"),
        pytest.param("if False:\n\n    def get_device_type():\n        return 'cpu'\n", id="if-false"),
    ],
)
def test_a8_03_no_fix_imports_a_helper_the_tree_does_not_bind_at_run_time(
    tmp_path: Path, device_py: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ModuleIndex` counted every `def` under any `if` as importable: a `device.py` that declares
    `get_device_type` only under `if TYPE_CHECKING:` (or deletes it) got `from veomni.utils.device import
    get_device_type` written into model code, which then fails with ImportError when imported."""
    model = _veomni_tree(tmp_path, device_py)
    main(["check", "--no-cache", "--fix", str(model)])
    capsys.readouterr()
    assert "get_device_type" not in model.read_text(encoding="utf-8")


def test_a8_03_the_runtime_definition_still_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    device_py = (
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    import torch\nelse:\n\n"
        "    def get_device_type():\n        return 'cpu'\n"
    )
    model = _veomni_tree(tmp_path, device_py)
    main(["check", "--no-cache", "--fix", str(model)])
    capsys.readouterr()
    assert "from veomni.utils.device import get_device_type" in model.read_text(encoding="utf-8")


# -- A8-04..06: the run's environment ------------------------------------------------------------------------


def test_a8_04_a_terminal_encoding_without_the_sources_characters_still_gets_the_report(
    tmp_path: Path,
) -> None:
    """PYTHONIOENCODING=ascii (as a Windows code page or an old `LANG=C` is for `é`): a flagged line holding
    `café ✓` ended the run with `internal error: UnicodeEncodeError`, exit 2 and no report at all."""
    (tmp_path / "m.py").write_text(CUDA_MODULE.replace("x.cuda()", "x.cuda()  # café ✓"), encoding="utf-8")
    proc = _cli("check", "--no-cache", "m.py", cwd=tmp_path, env={"PYTHONIOENCODING": "ascii"})
    assert proc.returncode == 1, proc.stderr
    assert b"NPU101" in proc.stdout and b"internal error" not in proc.stderr
    proc = _cli(
        "check",
        "--no-cache",
        "--output-format",
        "json",
        "m.py",
        cwd=tmp_path,
        env={"PYTHONIOENCODING": "ascii"},
    )
    assert proc.returncode == 1, proc.stderr
    import json

    assert json.loads(proc.stdout)[0]["code"] == "NPU101"


def test_a8_05_a_bad_output_format_in_the_environment_is_refused_before_anything_is_fixed(
    tmp_path: Path,
) -> None:
    """NPU_LINT_OUTPUT_FORMAT=bogus: `--fix` wrote the fixes, then failed with `internal error: ValueError`."""
    path = tmp_path / "m.py"
    path.write_text(CUDA_MODULE, encoding="utf-8")
    proc = _cli("check", "--no-cache", "--fix", "m.py", cwd=tmp_path, env={"NPU_LINT_OUTPUT_FORMAT": "bogus"})
    assert proc.returncode == 2
    assert b"internal error" not in proc.stderr and b"NPU_LINT_OUTPUT_FORMAT" in proc.stderr
    assert path.read_text(encoding="utf-8") == CUDA_MODULE  # nothing written


def test_a8_06_a_path_too_long_for_the_file_system_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 300-byte file name (or a 12 000-byte path) ended in `internal error: OSError: [Errno 36]`."""
    monkeypatch.chdir(tmp_path)
    assert main(["check", "--no-cache", "a" * 300 + ".py"]) == 2
    err = capsys.readouterr().err
    assert "internal error" not in err and "too long" in err
    assert len(err.splitlines()) == 1


def test_a8_07_npu_lint_toml_written_with_the_pyproject_header_says_what_to_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`[tool.npu-lint]` in npu-lint.toml (the README's pyproject spelling, copied): the error said "unknown
    configuration key `tool` in [tool.npu-lint]", naming a table the file does not have."""
    (tmp_path / "npu-lint.toml").write_text('[tool.npu-lint]\nselect = ["NPU1"]\n', encoding="utf-8")
    (tmp_path / "m.py").write_text(CUDA_MODULE, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert main(["check", "--no-cache", "m.py"]) == 2
    err = capsys.readouterr().err
    assert "unknown configuration key `tool`" not in err and "drop the [tool.npu-lint] header" in err


def test_a8_08_a_baseline_fingerprint_reads_the_findings_own_lines_past_a_form_feed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The fingerprint (the finding's line and its two neighbours) took the file's lines from
    `str.splitlines`, which breaks at a form feed too: past a `^L` line it hashed the line above instead of the
    finding's, and the line two below instead of the one below, so editing a line that is not a neighbour made a
    recorded finding "new"."""
    path = tmp_path / "m.py"
    path.write_text(
        "import torch\n#\x0c\n\n\ndef g(x):\n    a = 1\n    y = x.cuda()\n    b = 2\n    return y\n", "utf-8"
    )
    monkeypatch.chdir(tmp_path)
    main(["check", "--no-cache", "--write-baseline", "b.json", "m.py"])
    path.write_text(path.read_text("utf-8").replace("def g(x):", "def g2(x):"), "utf-8")
    capsys.readouterr()
    assert main(["check", "--no-cache", "--baseline", "b.json", "m.py"]) == 0


@pytest.mark.parametrize("family", ["semantics", "multimodal"])
def test_a8_09_a_def_report_range_is_on_the_def_line_past_a_form_feed(family: str) -> None:
    """`def_span` (the `def name` range the NPU4xx/NPU7xx findings on a patched method report) took the line from
    `str.splitlines`: past a `^L` line it searched `def ` on the line above and reported column 0..len+4 of the
    wrong text."""
    import ast
    import importlib
    from types import SimpleNamespace

    from npu_lint.core.source import SourceFile

    text = "import torch\n#\x0c\nclass A:\n    x = 1\n    def forward(self):\n        return 1\n"
    func = ast.parse(text).body[1].body[1]
    ctx = SimpleNamespace(source=SourceFile.from_text("m.py", text))
    def_span = importlib.import_module(f"npu_lint.rules.{family}._shared").def_span
    assert def_span(ctx, func) == (5, 4, 5, 4 + 4 + len("forward"))


def test_a8_10_a_spec_bodys_text_is_read_from_its_own_lines_past_a_form_feed() -> None:
    """patchgen's `_body_text` (the body a drift check compares between a spec and its generated file) sliced
    `str.splitlines()` by `ast` line numbers: a `^L` line above a patch function shifted the slice one line up,
    so the compared body lost its last statement and gained the `def` line."""
    import ast

    from npu_lint.veomni.patchgen import _body_text

    text = "#\x0c\ndef f(x):\n    y = x + 1\n    return y\n"
    node = ast.parse(text).body[0]
    assert _body_text(node, text) == _body_text(
        ast.parse(text.replace("\x0c", "")).body[0], text.replace("\x0c", "")
    )


@pytest.mark.parametrize(
    "pattern,ignored",
    [("!sub/other.py", True), ("!sub/m.py", False), ("{root}/sub/m.py", True), ("{root}/sub/*", True)],
)
def test_a8_11_negated_and_absolute_per_file_ignores_patterns_match_as_in_ruff(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    pattern: str,
    ignored: bool,
) -> None:
    """`per-file-ignores` patterns were single gitignore lines: `!sub/other.py` (ruff: every file but that one)
    and an absolute `/abs/sub/m.py` matched nothing, silently, so the findings they meant to ignore stayed."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "m.py").write_text(CUDA_MODULE, encoding="utf-8")
    (tmp_path / "pyproject.toml").write_text(
        f'[tool.npu-lint]\nper-file-ignores = {{ "{pattern.format(root=tmp_path.as_posix())}" = ["NPU101"] }}\n',
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    code = main(["check", "--no-cache", "sub/m.py"])
    capsys.readouterr()
    assert code == (0 if ignored else 1)


def test_a8_12_a_generated_file_named_through_a_symlinked_file_is_never_fixed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`alias.py -> generated/extra.py` named on the command line: `classify` resolved only the directory the name
    is in (the package), so `--fix alias.py` rewrote the generated file (one without the banner) through the link."""
    model = _veomni_tree(tmp_path, "def get_device_type():\n    return 'cpu'\n")
    generated = model.parent / "generated"
    generated.mkdir()
    (generated / "extra.py").write_text(CUDA_MODULE, encoding="utf-8")
    (model.parent / "alias.py").symlink_to(Path("generated") / "extra.py")
    main(["check", "--no-cache", "--fix", str(model.parent / "alias.py")])
    capsys.readouterr()
    assert (generated / "extra.py").read_text(encoding="utf-8") == CUDA_MODULE


def test_a8_13_several_reuse_fixes_in_one_spec_leave_one_isort_clean_import(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Round 7's mixed tree (veomni-main's OpSlot-era seed_oss in the VeomniOp tree): the second `--fix
    --unsafe-fixes` (A7-23: the reuses appear once the GPU spec is migrated) applied five NPU504 reuse fixes, each
    computed on the text that was read, each adding its own `from <gpu spec> import <name>`: five statements
    from one module, and the tree's `ruff check` failed I001. The tree's isort now merges what the fixes added."""

    import corpus

    from npu_lint.core.tools import ruff_binary

    dest = corpus.mixed_seed_oss(tmp_path)
    root = dest.parents[3]
    for _ in range(2):
        main(["check", "--no-cache", "--fix", "--unsafe-fixes", str(dest)])
    capsys.readouterr()
    npu_spec = dest / "seed_oss_npu_patch_gen_config.py"
    assert "replacement=seed_oss_attention_init_patched" in npu_spec.read_text(
        encoding="utf-8"
    )  # reuses applied
    binary = ruff_binary()
    assert binary is not None
    proc = subprocess.run(
        [binary, "check", "--no-cache", "--select", "I001", "--output-format", "concise", str(npu_spec)],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout


def test_a8_13_the_isort_merge_never_resorts_a_file_that_was_not_sorted(tmp_path: Path) -> None:
    from npu_lint.engine.format import format_touched

    (tmp_path / "pyproject.toml").write_text("[tool.ruff.lint]\nselect = ['I']\n", encoding="utf-8")
    path = str(tmp_path / "m.py")
    before = "import sys\nimport os\n\nfrom a import x\n\nprint(os, sys, x)\n"
    after = "import sys\nimport os\n\nfrom a import x\nfrom a import y\n\nprint(os, sys, x, y)\n"
    assert format_touched(before, after, path).startswith("import sys\nimport os\n")
    sorted_before = "import os\nimport sys\n\nfrom a import x\n\nprint(os, sys, x)\n"
    sorted_after = sorted_before.replace("from a import x\n", "from a import x\nfrom a import y\n")
    assert "from a import x, y\n" in format_touched(sorted_before, sorted_after, path)


def test_a7_23_one_fix_run_applies_the_fixes_an_earlier_fix_enables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Round 7's mixed tree: the NPU spec's NPU504 reuses appear only once `--fix` has made the GPU spec's
    patches device-neutral, so a chain of two fixes took two runs (A7-23). One run now reaches the fixed point:
    the reuses are applied, and a second run changes nothing."""

    import corpus

    dest = corpus.mixed_seed_oss(tmp_path)
    main(["check", "--no-cache", "--fix", "--unsafe-fixes", str(dest)])
    out = capsys.readouterr().out
    npu_spec = dest / "seed_oss_npu_patch_gen_config.py"
    after_one = {p: p.read_bytes() for p in dest.rglob("*.py")}
    assert "replacement=seed_oss_attention_init_patched" in npu_spec.read_text(encoding="utf-8")
    assert "(13 fixed," in out  # both passes counted in one summary
    main(["check", "--no-cache", "--fix", "--unsafe-fixes", str(dest)])
    assert "fixed" not in capsys.readouterr().out
    assert {p: p.read_bytes() for p in dest.rglob("*.py")} == after_one
