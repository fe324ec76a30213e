"""Adoption on a tree with existing findings: ``--add-noqa`` (ruff's semantics) and baselines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "npu_lint", "--no-cache", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
        timeout=300,
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "veomni" / "ops").mkdir(parents=True)
    return tmp_path


NOQA_IN = (
    "import torch\n\n\n"
    "def f(model, n):\n"
    "    x = torch.zeros(2).cuda()  # keep this comment\n"
    "    y = model.cuda()  # noqa: E501\n"
    '    s = """\n    %s""" % model.cuda()\n'
    "    return model.cuda(), torch.ones(n).cuda()  # noqa\n"
)
NOQA_OUT = (
    "import torch\n\n\n"
    "def f(model, n):\n"
    "    x = torch.zeros(2).cuda()  # keep this comment  # noqa: NPU101\n"
    "    y = model.cuda()  # noqa: E501, NPU101\n"
    '    s = """\n    %s""" % model.cuda()  # noqa: NPU101\n'
    "    return model.cuda(), torch.ones(n).cuda()  # noqa\n"
)


def test_add_noqa_appends_merges_and_is_idempotent(tree: Path) -> None:
    path = tree / "m.py"
    path.write_text(NOQA_IN)
    res = run("--add-noqa", "m.py", cwd=tree)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "Added 3 noqa directives."
    assert path.read_text() == NOQA_OUT
    assert run("m.py", cwd=tree).returncode == 0  # everything suppressed now
    again = run("--add-noqa", "m.py", cwd=tree)
    assert again.stdout.strip() == "Added 0 noqa directives."
    assert path.read_text() == NOQA_OUT


def test_add_noqa_keeps_crlf_and_refuses_fix(tree: Path) -> None:
    path = tree / "crlf.py"
    path.write_bytes(b"def f(m):\r\n    return m.cuda()\r\n")
    assert run("--add-noqa", "--fix", "crlf.py", cwd=tree).returncode == 2
    run("--add-noqa", "crlf.py", cwd=tree)
    assert path.read_bytes() == b"def f(m):\r\n    return m.cuda()  # noqa: NPU101\r\n"


def test_add_noqa_on_a_line_continued_by_a_string_goes_where_the_string_ends(tree: Path) -> None:
    """As ruff reads it (adversary round 3, B8): the noqa of a statement's first line that a multi-line string
    continues goes on the string's last line, never inside the string."""
    path = tree / "s.py"
    path.write_text('def f(m):\n    return m.cuda(), """\n    text"""\n')
    res = run("--add-noqa", "s.py", cwd=tree)
    assert "no noqa added at" not in res.stderr
    assert path.read_text() == 'def f(m):\n    return m.cuda(), """\n    text"""  # noqa: NPU101\n'
    assert run("s.py", cwd=tree).returncode == 0


BASE = "import torch\n\n\ndef f(model):\n    x = torch.zeros(2).cuda()\n    return model.cuda(), x\n"


def test_baseline_hides_known_findings_across_line_moves(tree: Path) -> None:
    path = tree / "pkg" / "m.py"
    path.parent.mkdir()
    path.write_text(BASE)
    res = run("--write-baseline", "npu-lint-baseline.json", ".", cwd=tree)
    assert res.returncode == 0 and "2 findings" in res.stdout
    data = json.loads((tree / "npu-lint-baseline.json").read_text())
    assert {f["path"] for f in data["findings"]} == {"pkg/m.py"}
    assert run("--baseline", "npu-lint-baseline.json", ".", cwd=tree).returncode == 0

    # code moves down, a new finding appears above: only the new one is reported (from another cwd too)
    path.write_text("import torch\n\n\ndef g(m):\n    return m.cuda()\n\n\n" + BASE.split("\n\n\n", 1)[1])
    res = run(
        "--baseline",
        str(tree / "npu-lint-baseline.json"),
        "--output-format",
        "concise",
        "m.py",
        cwd=path.parent,
    )
    assert res.returncode == 1
    assert res.stdout.splitlines()[0].startswith("m.py:5:14: NPU101")
    assert "2 known findings in the baseline not shown." in res.stdout


def test_baseline_counts_copies(tree: Path) -> None:
    path = tree / "m.py"
    path.write_text("def f(m):\n    return m.cuda()\n")
    run("--write-baseline", "b.json", "m.py", cwd=tree)
    path.write_text("def f(m):\n    return m.cuda()\n\n\ndef f(m):\n    return m.cuda()\n")
    res = run("--baseline", "b.json", "m.py", cwd=tree)
    assert res.returncode == 1 and "Found 1 error." in res.stdout


@pytest.mark.parametrize(
    "content", [None, "not json", '{"findings": []}', '{"npu-lint-baseline": 1, "findings": [1]}']
)
def test_bad_baseline_is_a_one_line_error(tree: Path, content: str | None) -> None:
    (tree / "m.py").write_text("def f(m):\n    return m.cuda()\n")
    if content is not None:
        (tree / "b.json").write_text(content)
    res = run("--baseline", "b.json", "m.py", cwd=tree)
    assert res.returncode == 2
    assert len(res.stderr.strip().splitlines()) == 1 and "internal error" not in res.stderr


def test_noqa_on_the_spec_line_suppresses_its_generated_findings(tmp_path: Path) -> None:
    from npu_lint.core.diagnostics import Diagnostic, Origin
    from npu_lint.core.source import SourceFile
    from npu_lint.engine import apply_suppressions

    spec = tmp_path / "toy_gpu_patch_gen_config.py"
    spec.write_text(
        "config = PatchConfig()\n\n\n@config.override_method('A.f')  # noqa: NPU101\ndef f(self):\n    pass\n"
    )
    gen = SourceFile.from_text(str(tmp_path / "generated" / "patched_modeling_toy_gpu.py"), "x = 1\ny = 2\n")

    def diag(code: str, line: int, note: str = "") -> Diagnostic:
        return Diagnostic(code, "n", "m", gen.path, 1, 0, 1, 1, origin=Origin(str(spec), line, note))

    kept = apply_suppressions(
        gen,
        [
            diag("NPU101", 4),
            diag("NPU102", 4),
            diag("NPU101", 1),
            diag("NPU101", 4, "unpatched upstream code: x"),
        ],
        set(),
    )
    assert [(d.code, d.origin.line, d.origin.note) for d in kept] == [
        ("NPU102", 4, ""),
        ("NPU101", 1, ""),
        ("NPU101", 4, "unpatched upstream code: x"),
    ]
