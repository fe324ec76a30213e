"""``npu-lint audit``: the inventory of a fixture package (markdown and json), as a user runs it (subprocess)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from npu_lint.audit import build_audit, render_markdown
from npu_lint.rules.base import all_rules

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "audit"
REPO = Path(__file__).resolve().parents[1]
MODEL = "veomni/models/transformers/demo"


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    """A copy of the fixture tree outside tests/ (files under tests/ are test code, which rules skip)."""
    dest = tmp_path / "repo"
    shutil.copytree(FIXTURE, dest)
    return dest


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "npu_lint", "audit", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_json_inventory(tree: Path) -> None:
    proc = run(tree, MODEL, "--format", "json")
    assert proc.returncode == 1, proc.stderr  # checklist items fail: the package is GPU-only
    report = json.loads(proc.stdout)
    assert report["model"] == "demo" and report["model_dir"] == MODEL
    files = {f["role"]: f for f in report["files"]}
    assert (
        files["GPU patch spec"]["present"]
        and files["GPU patch spec"]["path"] == "demo_gpu_patch_gen_config.py"
    )
    assert not files["NPU patch spec"]["present"]
    assert "deepcopy(gpu_config)" in files["NPU patch spec"]["note"]
    assert files["generated GPU file"]["present"]
    assert files["generated GPU file"]["note"] == "Based on transformers==5.9.0"
    for role in (
        "generated GPU diff",
        "generated NPU file",
        "generated NPU diff",
        "tests",
    ):
        assert not files[role]["present"], role
    # the file exists; what is missing is the switch, and the note says so
    assert files["__init__ switch"]["present"]
    assert "no `if IS_NPU_AVAILABLE:` switch" in files["__init__ switch"]["note"]
    assert "registers `demo`" in files["__init__ switch"]["note"]

    reuse = {r["file"]: r for r in report["reuse"]}
    assert reuse["checkpoint_converter.py"]["status"] == "reuse"
    assert reuse["demo_gpu_patch_gen_config.py::demo_mlp_forward_patched"]["status"] == "reuse"
    assert "deepcopy" in reuse["demo_gpu_patch_gen_config.py::demo_mlp_forward_patched"]["why"]
    rms_patch = reuse["demo_gpu_patch_gen_config.py::demo_rmsnorm_forward_patched"]
    assert rms_patch["status"] == "edit" and "OpSlot `veomni_rms_norm`" in rms_patch["why"]
    assert reuse["demo_gpu_patch_gen_config.py::demo_model_forward_patched"]["status"] == "edit"
    assert reuse["generated/patched_modeling_demo_gpu.py"]["status"] == "regenerate"
    assert reuse["__init__.py"]["status"] == "edit"
    assert reuse["modeling_attention.py"]["status"] == "edit"

    ops = {(o["op"], o["variant"]): o for o in report["ops"]}
    assert set(ops) == {
        ("attention", "standard"),
        ("cross_entropy_loss", "causal (registry row: standard)"),
        ("rms_norm", "standard"),
        ("rope", "full"),
        ("swiglu_mlp", "standard"),
    }
    rms = ops[("rms_norm", "standard")]
    assert rms["source"] == "OpSlot" and rms["npu"] == ["npu"] and "liger_kernel" in rms["gpu"]
    assert "instance-local `VeomniOp`" in rms["action"]
    assert ops[("cross_entropy_loss", "causal (registry row: standard)")]["npu"] == [
        "chunk_loss (device-agnostic)"
    ]
    assert "NPU uses chunk_loss" in ops[("cross_entropy_loss", "causal (registry row: standard)")]["action"]
    assert ops[("rope", "full")]["source"] == "eager (not dispatched)"
    assert ops[("swiglu_mlp", "standard")]["action"] == "none: eager runs on NPU"
    assert "vendor kernel call" in ops[("attention", "standard")]["source"]

    deps = {(d["kind"], d["name"]) for d in report["dependencies"]}
    assert ("vendor import", "torch_npu") in deps
    assert ("vendor import", "flash_attn.flash_attn_func") in deps
    assert ("CUDA API", ".cuda") in deps
    assert ("attention support flag", "_supports_flash_attn") in deps

    counts = {f["code"]: f["count"] for f in report["findings"]}
    assert counts["NPU101"] == 2  # the spec patch and the generated file
    assert counts["NPU301"] == 2  # config.add_import("torch_npu") and the flash_attn import
    assert counts["NPU302"] == 1
    assert report["findings_total"] == sum(counts.values())

    checklist = {c["key"]: c for c in report["checklist"]}
    assert [c["key"] for c in report["checklist"]] == [
        "pin",
        "gpu-deps",
        "device",
        "npu-backends",
        "veomniop",
        "semantics",
        "npu-spec",
        "registration",
        "generated",
        "scope",
    ]
    assert checklist["gpu-deps"]["status"] == "fail"
    assert checklist["device"]["status"] == "fail"
    assert (
        checklist["npu-spec"]["status"] == "fail" and checklist["npu-spec"]["note"] == "no NPU patch spec yet"
    )
    assert checklist["generated"]["status"] == "fail"
    assert checklist["veomniop"]["status"] == "fail"
    assert checklist["scope"]["status"] == "unknown" and "--base" in checklist["scope"]["note"]
    rules = all_rules()
    for key in ("pin", "npu-backends", "semantics", "registration"):
        codes = checklist[key]["codes"]
        if not any(c in rules for c in codes):
            assert checklist[key]["status"] == "unknown"
            assert "not in this npu-lint build's rule registry" in checklist[key]["note"]

    steps = report["steps"]
    assert any("demo_npu_patch_gen_config.py" in s and "deepcopy" in s for s in steps)
    assert any(s.startswith("Regenerate") and f"-o {MODEL}/generated --diff -v" in s for s in steps)
    assert any("IS_NPU_AVAILABLE" in s for s in steps)
    assert steps[-1].startswith("Re-run `npu-lint audit")


def test_markdown_report(tree: Path) -> None:
    out = tree / "audit.md"
    proc = run(tree, MODEL, "-o", str(out))
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == ""
    text = out.read_text()
    for heading in (
        "# Migration audit: `demo`",
        "## Files",
        "## Reuse",
        "## Operators",
        "## GPU-only dependencies",
        "## Findings by rule",
        "## Implementation steps",
        "## Migration completion checklist",
    ):
        assert heading in text, heading
    assert "| NPU patch spec | `demo_npu_patch_gen_config.py` | **missing** |" in text
    assert "| rms_norm | standard | rms_norm_implementation | OpSlot | liger_kernel, triton | npu |" in text
    assert "- [ ] **FAIL**: NPU spec reuses GPU bodies [NPU504]: no NPU patch spec yet" in text
    checklist = text.split("## Migration completion checklist")[1].split("NPU3xx")[0]
    # before migration only the transformers pin can pass (NPU506: the demo's generated file is based on the
    # installed transformers)
    assert all("[NPU506]" in line for line in checklist.splitlines() if line.startswith("- [x] "))
    # the markdown is a rendering of the json report: the same data
    report = json.loads(run(tree, MODEL, "--format", "json").stdout)
    assert text == render_markdown(report)
    assert build_audit(str(tree / MODEL))["findings_total"] == report["findings_total"]


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        env={
            **os.environ,
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@e",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@e",
        },
    )


def test_base_lists_out_of_scope_files(tree: Path) -> None:
    assert shutil.which("git"), "git is not installed"
    _git(tree, "init", "-q")
    _git(tree, "add", ".")
    _git(tree, "commit", "-qm", "base")
    (tree / MODEL / "demo_npu_patch_gen_config.py").write_text("config = None\n")
    (tree / "configs").mkdir()
    (tree / "configs" / "demo_sft.yaml").write_text("lr: 1\n")
    (tree / "logs").mkdir()
    (tree / "logs" / "run1.log").write_text("loss 1.0\n")
    (tree / "train_demo.sh").write_text("torchrun x\n")
    (tree / "loss_curve.png").write_bytes(b"\x89PNG")
    (tree / "tests").mkdir()
    (tree / "tests" / "test_demo.py").write_text("def test_x():\n    pass\n")
    # a lint run leaves its cache in the tree: ignored by git (its .gitignore), so not a changed file
    subprocess.run(
        [sys.executable, "-m", "npu_lint", "check", MODEL],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        timeout=300,
    )
    assert (tree / ".npu_lint_cache" / ".gitignore").is_file()
    proc = run(tree, MODEL, "--format", "json", "--base", "HEAD")
    report = json.loads(proc.stdout)
    changed = {c["path"]: (c["category"], c["scope"]) for c in report["changed_since_base"]}
    assert changed == {
        f"{MODEL}/demo_npu_patch_gen_config.py": ("model package", "in scope"),
        "configs/demo_sft.yaml": ("training config", "out of scope"),
        "logs/run1.log": ("log", "out of scope"),
        "train_demo.sh": ("launch script", "out of scope"),
        "loss_curve.png": ("plot", "out of scope"),
        "tests/test_demo.py": ("test", "in scope"),
    }
    scope = next(c for c in report["checklist"] if c["key"] == "scope")
    assert scope["status"] == "fail" and scope["note"] == "4 of 6 changed files are out of scope"
    files = {f["role"]: f for f in report["files"]}
    assert files["tests"]["present"] and "tests/test_demo.py" in files["tests"]["note"]


def test_bad_base_is_reported_not_fatal(tree: Path) -> None:
    proc = run(tree, MODEL, "--format", "json", "--base", "no-such-rev")
    report = json.loads(proc.stdout)
    scope = next(c for c in report["checklist"] if c["key"] == "scope")
    assert scope["status"] == "unknown" and scope["note"].startswith("git:")


def test_missing_directory_is_a_usage_error(tmp_path: Path) -> None:
    proc = run(tmp_path, "nope")
    assert proc.returncode == 2
    assert "not a directory" in proc.stderr


# -- statements a reader can trust (issue 14) ---------------------------------------------------------------


def test_not_a_model_directory_is_a_clear_error(tree: Path) -> None:
    proc = run(tree, "veomni/models")
    assert proc.returncode == 2
    assert "is not a model package" in proc.stderr and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1


def test_statements_are_consistent(tree: Path) -> None:
    report = json.loads(run(tree, MODEL, "--format", "json").stdout)
    items = {c["key"]: c for c in report["checklist"]}
    # the pin passes only when the comparison was made and agrees
    pin = items["pin"]
    try:
        import importlib.metadata as md

        installed = md.version("transformers")
    except Exception:
        installed = None
    if installed is None:
        assert pin["status"] == "unknown" and "not installed" in pin["note"]
    elif installed == "5.9.0":
        assert pin["status"] == "pass"
    else:
        assert pin["status"] == "fail" and installed in pin["note"]
    # a registration item never passes next to "registered: none"
    reg = items["registration"]
    assert not (reg["status"] == "pass" and "registered: none" in reg["evidence"])
    md_text = render_markdown(report)
    assert "project index (" not in md_text  # the header names where the rows come from
    assert "(NPU503)" not in next(s for s in report["steps"] if "__init__` switch" in s)


def test_generated_copies_are_counted_once() -> None:
    from npu_lint.core.diagnostics import Diagnostic, Origin
    from npu_lint.engine.adopt import distinct

    def diag(path: str, line: int, origin_line: int) -> Diagnostic:
        return Diagnostic("NPU201", "n", "m", path, line, 0, line, 1, origin=Origin("spec.py", origin_line))

    gpu, npu = "generated/patched_gpu.py", "generated/patched_npu.py"
    diags = [diag(gpu, 10, 5), diag(gpu, 11, 5), diag(npu, 10, 5), diag(npu, 11, 5), diag(npu, 20, 7)]
    kept, folded = distinct(diags)
    assert folded == 2  # two findings of one file from spec line 5 stay two; the other file's copies fold
    assert [(d.path, d.line) for d in kept] == [(gpu, 10), (gpu, 11), (npu, 20)]


def test_models_kernel_layout_finds_tests_and_the_registry_import(tmp_path: Path) -> None:
    """The audit knows a model package in any layout (veomni/models_kernel/...): its tests are found and the
    package that imports every model package is in scope with --base."""
    assert shutil.which("git"), "git is not installed"
    tree = tmp_path / "repo"
    shutil.copytree(FIXTURE, tree)
    (tree / "veomni" / "models").rename(tree / "veomni" / "models_kernel")
    model = MODEL.replace("veomni/models/", "veomni/models_kernel/")
    registry = tree / "veomni" / "models_kernel" / "transformers" / "__init__.py"
    registry.write_text("")
    _git(tree, "init", "-q")
    _git(tree, "add", ".")
    _git(tree, "commit", "-qm", "base")
    registry.write_text("from . import demo  # noqa: F401\n")
    (tree / "tests").mkdir()
    (tree / "tests" / "test_demo.py").write_text("def test_x():\n    pass\n")
    proc = run(tree, model, "--format", "json", "--base", "HEAD")
    report = json.loads(proc.stdout)
    changed = {c["path"]: (c["category"], c["scope"]) for c in report["changed_since_base"]}
    assert changed["veomni/models_kernel/transformers/__init__.py"] == ("model registry import", "in scope")
    files = {f["role"]: f for f in report["files"]}
    assert files["tests"]["present"] and "tests/test_demo.py" in files["tests"]["note"]
