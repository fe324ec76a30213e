"""``npu-lint verify`` as a command: exit codes, isolation of the child processes, and `check` not importing it."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from verify_helpers import TRANSFORMERS, findings, make_tree, run_verify, statuses

REPO = Path(__file__).resolve().parents[2]


def test_not_a_model_package_exits_2(tmp_path):
    code, out, err = run_verify(str(tmp_path))
    assert code == 2 and out == ""
    assert (
        err.strip()
        == f"npu-lint verify: {tmp_path}: not a VeOmni model package (no *_gpu_patch_gen_config.py and no generated/)"
    )


@pytest.mark.corpus
def test_unknown_check_exits_2(main_tree):
    code, _, err = run_verify(str(main_tree / TRANSFORMERS / "qwen3"), "--checks", "pin,speed")
    assert code == 2 and "unknown check speed" in err


@pytest.mark.corpus
def test_missing_torch_is_named_with_the_install_command(main_tree, tmp_path):
    """An interpreter without torch (a fresh virtualenv of the base interpreter: no site-packages of ours)."""
    base = getattr(sys, "_base_executable", None) or sys.executable
    subprocess.run([base, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True, timeout=120)
    bare = tmp_path / "bare" / "bin" / "python"
    probe = subprocess.run([str(bare), "-I", "-c", "import torch"], capture_output=True)
    assert probe.returncode != 0, (
        "a fresh virtualenv imports torch: the base interpreter has it in its stdlib path"
    )
    code, _, err = run_verify(str(main_tree / TRANSFORMERS / "qwen3"), "--python", str(bare))
    assert code == 2
    assert "not installed" in err and "pip install 'npu-lint[verify]'" in err


def test_patchgen_missing_cannot_run(tmp_path):
    """A tree without ``patchgen-pkg`` (like the veomni wheel, which ships only the ``veomni.patchgen`` shim),
    no ``--patchgen`` and no patchgen installed: the check cannot run (exit 2) and says where patchgen lives."""
    assert importlib.util.find_spec("patchgen") is None, "patchgen is installed in the test environment"
    tree = make_tree(tmp_path / "tree", patchgen=False)
    code, report, err = run_verify(
        str(tree / TRANSFORMERS / "qwen3"), "--checks", "pin,patchgen", "--format", "json"
    )
    assert code == 2 and statuses(report) == {"pin": "pass", "patchgen": "error"}, err
    assert "patchgen-pkg" in report["models"][0]["checks"][1]["details"]


@pytest.mark.corpus
def test_a_hang_is_a_timeout_not_a_hang_of_npu_lint(main_tree):
    code, report, _ = run_verify(
        str(main_tree / TRANSFORMERS / "qwen3"), "--checks", "parity", "--timeout", "0.5", "--format", "json"
    )
    assert code == 1
    assert findings(report, "parity")[0]["what"] == "the check did not finish within 0.5 s"


@pytest.mark.corpus
def test_a_crash_in_model_code_is_a_failure(mutable_tree):
    qwen3 = mutable_tree / TRANSFORMERS / "qwen3"
    gen = qwen3 / "generated" / "patched_modeling_qwen3_gpu.py"
    gen.write_text(gen.read_text() + "\nimport os\n\nos._exit(7)\n")
    code, report, _ = run_verify(str(qwen3), "--checks", "parity", "--format", "json")
    assert code == 1
    assert findings(report, "parity")[0]["what"] == "the check's interpreter died (exit code 7)"


@pytest.mark.corpus
def test_the_child_imports_the_tree_not_the_working_directory(main_tree, tmp_path):
    """A `veomni` package in the caller's working directory must not shadow the tree being verified."""
    decoy = tmp_path / "veomni"
    decoy.mkdir()
    (decoy / "__init__.py").write_text("raise ImportError('the decoy veomni in the working directory')\n")
    proc = subprocess.run(
        [sys.executable, "-m", "npu_lint", "verify", str(main_tree / TRANSFORMERS / "qwen3"), "--checks", "checkpoint",
         "--format", "json"],
        capture_output=True, text=True, cwd=tmp_path, timeout=600,
        env={**__import__("os").environ, "PYTHONPATH": f"{tmp_path}:{REPO}"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_check_never_imports_verify():
    code = (
        "import sys; from npu_lint.cli import main; main(['check', '--no-cache', '-q', 'examples']); "
        "bad = [m for m in sys.modules if m.startswith(('npu_lint.verify', 'torch', 'transformers'))]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stdout


@pytest.mark.corpus
def test_several_models_one_report(main_tree):
    code, report, _ = run_verify(
        str(main_tree / TRANSFORMERS / "qwen3"), str(main_tree / TRANSFORMERS / "llama"), "--checks", "pin,multimodal",
        "--format", "json",
    )  # fmt: skip
    assert code == 0
    assert [m["package"] for m in report["models"]] == [
        "veomni.models.transformers.qwen3",
        "veomni.models.transformers.llama",
    ]
    assert statuses(report, 1) == {"pin": "pass", "multimodal": "skip"}
    assert report["models"][1]["checks"][0]["facts"] == {"installed": "5.9.0", "pin": "5.9.0"}


@pytest.mark.corpus
def test_output_file_in_a_missing_directory_exits_2_before_running(main_tree, tmp_path):
    code, out, err = run_verify(
        str(main_tree / TRANSFORMERS / "qwen3"), "-o", str(tmp_path / "nope" / "r.md")
    )
    assert code == 2 and out == ""
    assert err == f"npu-lint verify: cannot write {tmp_path / 'nope' / 'r.md'}: no such directory\n"
