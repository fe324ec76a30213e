"""`npu-lint migrate` on a copy of VeOmni `main` (OpSlot generation, its real patchgen-pkg/ and tests/models/).

One module-scoped copy is migrated three times (qwen2 and qwen2_vl together): a dry run (nothing may be
written), `--apply` (with verify, which also runs the generated model tests with pytest) and a second `--apply`
(nothing may change). The asserts read that one copy: an NPU spec per package, a switched and fully registered
`__init__`, generated NPU modules that patchgen's own drift check accepts, a model test under tests/, no new
`make quality` finding (the tree's ruff configuration). Rollback is tested on a second, cheap copy.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import corpus
import pytest

from npu_lint.cli import main

PACKAGES = ("qwen2", "qwen2_vl")
MODELS = "veomni/models/transformers"
QUALITY_DIRS = ("tasks", "tests", "veomni", "docs")  # VeOmni's `make quality` directories


def _hashes(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, _, filenames in os.walk(root):  # __pycache__ included: migrate never runs code in the tree
        for name in filenames:
            path = Path(dirpath) / name
            out[path.relative_to(root).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _migrate(root: Path, report: Path, *flags: str) -> tuple[int, dict]:
    dirs = [str(root / MODELS / p) for p in PACKAGES]
    code = main(["migrate", *dirs, "--format", "json", "-o", str(report), "-q", *flags])
    return code, json.loads(report.read_text(encoding="utf-8"))


def _quality(root: Path) -> set[str]:
    """`make quality` findings (ruff check + ruff format --check over the tree's directories, its own config)."""
    from npu_lint.core.tools import ruff_binary

    ruff = ruff_binary()
    assert ruff is not None
    dirs = [d for d in QUALITY_DIRS if (root / d).exists()]
    check = subprocess.run(
        [ruff, "check", "--no-cache", "--output-format", "concise", *dirs],
        cwd=root,
        capture_output=True,
        text=True,
    )
    fmt = subprocess.run(
        [ruff, "format", "--no-cache", "--check", *dirs], cwd=root, capture_output=True, text=True
    )
    lines = check.stdout.splitlines() + fmt.stdout.splitlines()
    return {ln for ln in lines if ln.startswith(tuple(dirs))}


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> dict:
    base = tmp_path_factory.mktemp("migrate")
    root = corpus.shared_tree_copy(corpus.VEOMNI_MAIN, base / "veomni-main")
    pristine = _hashes(root)
    quality_before = _quality(root)
    dry_code, dry = _migrate(root, base / "dry.json", "--no-verify")
    after_dry = _hashes(root)
    apply_code, applied = _migrate(root, base / "apply.json", "--apply")
    after_apply = _hashes(root)
    again_code, again = _migrate(root, base / "again.json", "--apply", "--no-verify")
    return {
        "root": root,
        "pristine": pristine,
        "quality_before": quality_before,
        "dry": (dry_code, dry, after_dry),
        "apply": (apply_code, applied, after_apply),
        "again": (again_code, again, _hashes(root)),
    }


def test_dry_run_writes_nothing_and_shows_the_plan(migrated: dict) -> None:
    code, report, after = migrated["dry"]
    assert after == migrated["pristine"]
    assert code == 0 and report["ok"] and not report["applied"] and report["written"] == []
    assert "+    if IS_NPU_AVAILABLE:" in report["diff"]
    audit = next(s for s in report["steps"] if s["name"] == "audit")
    assert set(audit["data"]["audit"]) == set(PACKAGES) and all(
        a["plan"] for a in audit["data"]["audit"].values()
    )
    created = {c["path"] for c in report["changed_files"] if c["kind"] == "created"}
    assert f"{MODELS}/qwen2/qwen2_npu_patch_gen_config.py" in created


def test_apply_migrates_both_packages(migrated: dict) -> None:
    code, report, _ = migrated["apply"]
    root = migrated["root"]
    assert report["ok"] and report["applied"], report["left_for_a_person"]
    steps = {s["name"]: s for s in report["steps"]}
    assert steps["dispatch"]["status"] == "skipped"  # OpSlot: said once, the rest is done
    assert "no instance-local handle API" in steps["dispatch"]["notes"][0]
    for pkg in PACKAGES:
        spec = (root / MODELS / pkg / f"{pkg}_npu_patch_gen_config.py").read_text()
        assert "deepcopy(gpu_config)" in spec
        init = (root / MODELS / pkg / "__init__.py").read_text()
        assert "if IS_NPU_AVAILABLE:" in init and f"patched_modeling_{pkg}_npu import" in init
        assert (root / MODELS / pkg / "generated" / f"patched_modeling_{pkg}_npu.py").is_file()
        assert (root / "tests" / "models" / f"test_{pkg}_npu.py").is_file()
    assert steps["init"]["data"]["registered"] == {"qwen2": ["qwen2"], "qwen2_vl": ["qwen2_vl"]}
    # verify ran (the extra is installed here), and the generated model tests passed under pytest
    notes = steps["verify"]["notes"]
    for pkg in PACKAGES:
        assert any(
            n.startswith(f"{pkg}: pytest tests/models/test_{pkg}_npu.py:") and " passed" in n for n in notes
        )
        assert not any(n.startswith(f"{pkg}: pytest") and "failed" in n for n in notes), notes
        assert f"{pkg}: verify checkpoint: pass" in " ".join(notes)
    assert code == 0, report["left_for_a_person"]


def test_patchgen_check_accepts_the_generated_modules(migrated: dict) -> None:
    root = migrated["root"]
    configs = [
        f"veomni.models.transformers.{p}.{p}_{side}_patch_gen_config"
        for p in PACKAGES
        for side in ("gpu", "npu")
    ]
    script = (
        "import sys; sys.path[:0] = [sys.argv[1], sys.argv[1] + '/patchgen-pkg']\n"
        "from patchgen.check_patchgen import run_check\n"
        "from patchgen.cli import _load_discovery\n"
        "sys.exit(run_check(_load_discovery(), configs=sys.argv[2:]))\n"
    )
    env = {
        **os.environ,
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, "-I", "-c", script, str(root), *configs],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count("  OK    ") == 4


def test_no_new_quality_finding(migrated: dict) -> None:
    assert _quality(migrated["root"]) <= migrated["quality_before"]


def test_second_apply_changes_nothing(migrated: dict) -> None:
    code, report, after = migrated["again"]
    assert code == 0 and report["ok"]
    assert report["changed_files"] == [] and report["written"] == []
    assert after == migrated["apply"][2]


def test_failed_step_is_undone_and_stops_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import npu_lint.migrate as migrate_pkg
    from npu_lint.migrate.steps import StepFailed

    root = corpus.shared_tree_copy(corpus.VEOMNI_MAIN, tmp_path / "veomni-main")
    pristine = _hashes(root)

    def broken_patchgen(run, result) -> None:  # noqa: ANN001
        pkg = run.packages[0]
        (pkg.stage_dir / "generated" / "half_written.py").write_text("x = (")
        (pkg.stage_dir / "__init__.py").write_text("broken")
        raise StepFailed("simulated patchgen failure")

    monkeypatch.setattr(migrate_pkg, "step_patchgen", broken_patchgen)
    result = migrate_pkg.migrate([str(root / MODELS / "qwen2")], apply=True, run_verify=False)
    assert result.failed is not None and result.failed.name == "patchgen"
    assert [r.name for r in result.run.results][-1] == "patchgen"  # the run stopped there
    after = _hashes(root)
    # the tree is as it was before the failing step: the spec of the step before it, nothing else (the
    # `__init__` switch comes after patchgen, so it never imports a module that was not generated)
    changed = {k for k in set(after) | set(pristine) if after.get(k) != pristine.get(k)}
    assert changed == {f"{MODELS}/qwen2/qwen2_npu_patch_gen_config.py"}


def test_concurrent_edit_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import npu_lint.migrate as migrate_pkg
    from npu_lint.migrate.plan import StepResult

    root = corpus.shared_tree_copy(corpus.VEOMNI_MAIN, tmp_path / "veomni-main")
    init = root / MODELS / "qwen2" / "__init__.py"

    def edit_meanwhile(run, result: StepResult) -> None:  # noqa: ANN001
        result.status = "skipped"
        init.write_text(init.read_text() + "# edited by someone else\n")

    monkeypatch.setattr(migrate_pkg, "step_patchgen", edit_meanwhile)
    pristine = _hashes(root)
    with pytest.raises(OSError, match="changed in the tree"):
        migrate_pkg.migrate([str(root / MODELS / "qwen2")], apply=True, run_verify=False)
    after = _hashes(root)
    # only the other writer's edit is there: the model test written before the conflict was removed again
    assert {k for k in set(after) | set(pristine) if after.get(k) != pristine.get(k)} == {
        f"{MODELS}/qwen2/__init__.py"
    }
    assert "IS_NPU_AVAILABLE" not in init.read_text() and init.read_text().endswith(
        "# edited by someone else\n"
    )
