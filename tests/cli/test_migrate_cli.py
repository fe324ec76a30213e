"""`npu-lint migrate`: usage errors, the generated model test's shape per tree generation, the report."""

from __future__ import annotations

import ast
import json
import time
from pathlib import Path

import corpus
import pytest

from npu_lint.cli import main
from npu_lint.migrate import MigrationResult
from npu_lint.migrate.plan import Package, Run, StepResult
from npu_lint.migrate.report import render_json, render_markdown
from npu_lint.migrate.testgen import MARKER, model_test_path, render_test


def test_not_a_model_package_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["migrate", str(tmp_path)]) == 2
    assert "is not a model package" in capsys.readouterr().err


def test_missing_directory_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["migrate", str(tmp_path / "nope")]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_help_lists_apply(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["migrate", "--help"])
    assert exc.value.code == 0
    assert "--apply" in capsys.readouterr().out


def _package(root: Path, models: str, name: str) -> Package:
    directory = root / models / name
    return Package(name, directory, directory, f"{models.replace('/', '.')}.{name}")


def test_model_test_on_an_opslot_tree_skips_only_isolation_with_its_reason() -> None:
    root = corpus.shared_tree(corpus.VEOMNI_MAIN)
    pkg = _package(root, "veomni/models/transformers", "qwen2_vl")
    text = render_test(root, pkg)
    tree = ast.parse(text)
    tests = {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}
    assert {
        "test_generated_modules_import",
        "test_registration_selects_module",
        "test_eager_parity_gpu_npu",
        "test_forward_backward_finite",
        "test_checkpoint_keys_convert",
        "test_multimodal_inputs_propagate",
        "test_patchgen_reproduces_npu_module",
        "test_two_models_keep_their_handles",
    } <= tests
    assert MARKER in text
    assert (
        'NPU_MODULE = "veomni.models.transformers.qwen2_vl.generated.patched_modeling_qwen2_vl_npu"' in text
    )
    assert "USES_MROPE = True" in text  # transformers' Qwen2-VL needs the rope sections resized
    assert "parents[2]" in text and model_test_path(root, pkg) == "tests/models/test_qwen2_vl_npu.py"
    skip = text[text.index("@pytest.mark.skip(") : text.index("def test_two_models_keep_their_handles")]
    assert "op-slot generation" in skip and "module globals" in skip


def test_model_test_on_a_handle_tree_checks_isolation() -> None:
    root = corpus.shared_tree(corpus.VEOMNI_OP)
    pkg = _package(root, "veomni/models_kernel/transformers", "qwen2")
    text = render_test(root, pkg)
    ast.parse(text)
    assert "@pytest.mark.skip(" not in text
    assert "from veomni.ops import VeomniOp" in text
    assert 'install_ops(eager_ops_config(attn_implementation="sdpa"))' in text
    assert "test_multimodal_inputs_propagate" not in text  # a text model


def test_report_lists_steps_changes_and_what_is_left(tmp_path: Path) -> None:
    pkg = Package("toy", tmp_path / "toy", tmp_path / "toy", "veomni.models.transformers.toy")
    run = Run(
        tmp_path, tmp_path, [pkg], apply=False, python="python", timeout=1.0, started=time.perf_counter()
    )
    done = StepResult(
        "npu-spec", "NPU sibling spec", status="changed", changed=["a/toy_npu_patch_gen_config.py"]
    )
    done.notes.append("a/toy_npu_patch_gen_config.py: created")
    failed = StepResult("patchgen", "patchgen twice", status="failed")
    failed.todo.append("step failed, its changes undone and the run stopped: boom")
    run.results = [done, failed]
    result = MigrationResult(run, [("a/toy_npu_patch_gen_config.py", None, b"config = 1\n")], [])
    text = render_markdown(result)
    assert "**Stopped at step `patchgen`**" in text
    assert "| 2 | patchgen twice | FAILED (undone) |" in text
    assert "- created: `a/toy_npu_patch_gen_config.py`" in text
    assert "- [patchgen] step failed" in text
    assert "+config = 1" in text  # a dry run shows the diff
    data = json.loads(render_json(result))
    assert data["ok"] is False and data["failed_step"] == "patchgen" and data["applied"] is False
    assert data["left_for_a_person"] == [
        "[patchgen] step failed, its changes undone and the run stopped: boom"
    ]


def test_a_symlink_inside_the_package_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A linked generated/ would send migrate's writes outside the tree, even in a dry run (an independent
    adversary, round 2): refused before anything runs, and the outside copy is untouched."""
    import shutil

    root = tmp_path / "tree"
    (root / "veomni" / "ops").mkdir(parents=True)
    pkg = root / "veomni" / "models" / "transformers" / "qwen3"
    shutil.copytree(corpus.shared_tree(corpus.VEOMNI_MAIN) / "veomni/models/transformers/qwen3", pkg)
    outside = tmp_path / "outside"
    shutil.move(pkg / "generated", outside)
    (pkg / "generated").symlink_to(outside, target_is_directory=True)
    before = {p.name: p.read_bytes() for p in outside.iterdir()}
    assert main(["migrate", str(pkg), "--no-verify"]) == 2
    assert "is a symbolic link" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in outside.iterdir()} == before


def test_children_get_a_minimal_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from npu_lint.migrate.steps import _env

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    stage = tmp_path / "base" / "tree"
    stage.mkdir(parents=True)
    run = Run(tmp_path, stage, [], False, "/usr/bin/python3", 10.0, False)
    env = _env(run)
    assert "AWS_SECRET_ACCESS_KEY" not in env and env["HOME"].startswith(str(tmp_path / "base"))
    assert _env(run, isolated=False)["PYTHONPATH"] == str(stage)


def test_a_ruff_that_hangs_is_stopped_and_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ruff call of the migration is bounded by the run's timeout (the last one was not): a ruff that
    never returns becomes a failed check with a to-do line, not a hung migration."""
    from npu_lint.core import tools
    from npu_lint.migrate.plan import Package, StepResult
    from npu_lint.migrate.steps import step_ruff

    fake = tmp_path / "ruff"
    fake.write_text('#!/bin/sh\n[ "$1" = format ] && [ "$2" = --check ] && exec sleep 30\nexit 0\n')
    fake.chmod(0o755)
    monkeypatch.setattr(tools, "ruff_binary", lambda: str(fake))
    stage = tmp_path / "base" / "tree"
    pkg_dir = stage / "veomni" / "models" / "toy"
    pkg_dir.mkdir(parents=True)
    (pkg_dir / "toy_npu_patch_gen_config.py").write_text("x = 1\n")
    package = Package("toy", tmp_path / "real", pkg_dir, "veomni.models.toy")
    run = Run(tmp_path, stage, [package], False, "/usr/bin/python3", 1.0, False)
    result = StepResult("ruff", "ruff")
    step_ruff(run, result, {})
    assert result.status == "failed-check"
    assert result.todo == ["ruff format did not finish in 1 s: run the tree's `make quality`"]
