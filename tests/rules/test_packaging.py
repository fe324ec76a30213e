"""NPU5xx (project rules) on the fixture tree tests/fixtures/packaging/tree, run through the CLI as a user would.

The tree holds two model packages of our own writing: ``widget`` (GPU-only VLM: no NPU spec, static imports, a
`.cuda()` in a patched method and one in unpatched upstream code) and ``gadget`` (migrated: an NPU spec that copies
a GPU patch, a hand-edited NPU generated file, an import of a class the generated modules lack).
Expected outputs are whole files under tests/fixtures/packaging/expected/.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "packaging"
EXPECTED = FIXTURES / "expected"
WIDGET = Path("veomni/models/transformers/widget")


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "npu_lint", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    shutil.copytree(FIXTURES / "tree", tmp_path / "tree")
    return tmp_path / "tree"


def _digest(root: Path, sub: str = "generated") -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*.py"))
        if sub in p.parts
    }


def _findings(tree: Path, *select: str) -> list[dict]:
    res = run(
        "check", "--no-cache", "--select", ",".join(select), "--output-format", "json", "veomni", cwd=tree
    )
    assert res.returncode in (0, 1), res.stderr
    out = []
    for d in json.loads(res.stdout):
        origin = d["origin"]
        if origin is not None:
            origin = {
                "path": Path(origin["filename"]).resolve().relative_to(tree.resolve()).as_posix(),
                "row": origin["row"],
                "note": origin["note"],
            }
        out.append(
            {
                "code": d["code"],
                "path": Path(d["filename"]).resolve().relative_to(tree.resolve()).as_posix(),
                "row": d["location"]["row"],
                "column": d["location"]["column"],
                "origin": origin,
            }
        )
    return out


def test_findings_and_origins(tree: Path) -> None:
    """Every NPU5 finding on the tree, plus NPU101 in the generated file with its spec origin (a patched line maps
    to the spec line that produced it; unpatched upstream code names the override that would change it)."""
    got = _findings(tree, "NPU501", "NPU502", "NPU503", "NPU504", "NPU505", "NPU101")
    expected = json.loads((EXPECTED / "findings.json").read_text())
    assert got == expected


def test_fix_creates_npu_spec_and_switches_init(tree: Path) -> None:
    before = _digest(tree)
    res = run(
        "check",
        "--no-cache",
        "--fix",
        "--unsafe-fixes",
        "--select",
        "NPU5",
        "--ignore",
        "NPU506",
        "veomni",
        cwd=tree,
    )
    assert res.returncode == 1, res.stdout + res.stderr  # NPU503/504/505 have no applicable fix
    assert f"Created {WIDGET / 'widget_npu_patch_gen_config.py'}" in res.stdout
    assert (tree / WIDGET / "widget_npu_patch_gen_config.py").read_text() == (
        EXPECTED / "widget_npu_patch_gen_config.py"
    ).read_text()
    assert (tree / WIDGET / "__init__.py").read_text() == (EXPECTED / "widget__init__.py").read_text()
    gadget_npu = tree / "veomni/models/transformers/gadget/gadget_npu_patch_gen_config.py"
    assert gadget_npu.read_text() == (EXPECTED / "gadget_npu_patch_gen_config.py").read_text()  # NPU504
    assert _digest(tree) == before, "a fix touched generated/"
    subprocess.run(
        [sys.executable, "-m", "py_compile", str(tree / WIDGET / "widget_npu_patch_gen_config.py")],
        check=True,
    )
    snapshot = {p: p.read_bytes() for p in tree.rglob("*.py")}
    again = run(
        "check",
        "--no-cache",
        "--fix",
        "--unsafe-fixes",
        "--select",
        "NPU5",
        "--ignore",
        "NPU506",
        "veomni",
        cwd=tree,
    )
    assert {p: p.read_bytes() for p in tree.rglob("*.py")} == snapshot, again.stdout
    assert "NPU501" not in again.stdout and "NPU502" not in again.stdout


def test_safe_fix_creates_no_file(tree: Path) -> None:
    """Creating a file is never a safe fix: a plain --fix leaves NPU501's spec for --unsafe-fixes."""
    before = {p for p in tree.rglob("*") if p.is_file()}
    res = run("check", "--no-cache", "--fix", "--select", "NPU501,NPU502", "veomni", cwd=tree)
    assert {p for p in tree.rglob("*") if p.is_file()} == before, res.stdout
    assert "NPU501" in res.stdout and "NPU502" in res.stdout
    unsafe = run("check", "--no-cache", "--fix", "--unsafe-fixes", "--select", "NPU501", "veomni", cwd=tree)
    assert (tree / WIDGET / "widget_npu_patch_gen_config.py").exists(), unsafe.stdout


def test_fix_in_generated_file_goes_to_the_spec(tree: Path) -> None:
    """NPU101 in a generated file is display-only there; the same finding in the spec is what --fix changes."""
    before = _digest(tree)
    res = run("check", "--no-cache", "--fix", "--select", "NPU101", "veomni", cwd=tree)
    assert _digest(tree) == before
    assert (tree / WIDGET / "widget_gpu_patch_gen_config.py").read_text() == (
        EXPECTED / "widget_gpu_patch_gen_config.py"
    ).read_text()
    assert "generated/patched_modeling_widget_gpu.py:80:52: NPU101" in res.stdout
    assert "origin: veomni/models/transformers/widget/widget_gpu_patch_gen_config.py:40" in res.stdout


def test_origin_in_every_output_format(tree: Path) -> None:
    gen = "veomni/models/transformers/widget/generated/patched_modeling_widget_gpu.py"
    for fmt, needle in (
        ("text", "widget_gpu_patch_gen_config.py:40"),
        ("concise", "widget_gpu_patch_gen_config.py:40"),
        ("json", "widget_gpu_patch_gen_config.py"),
        ("sarif", "widget_gpu_patch_gen_config.py"),
        ("github", "widget_gpu_patch_gen_config.py:40"),
        ("junit", "widget_gpu_patch_gen_config.py:40"),
    ):
        res = run("check", "--no-cache", "--select", "NPU101", "--output-format", fmt, gen, cwd=tree)
        assert needle in res.stdout, (fmt, res.stdout[:2000])


def test_npu505_clean_after_regeneration(tree: Path) -> None:
    """A generated file that matches its spec (the GPU modules here) has no NPU505 finding."""
    got = _findings(tree, "NPU505")
    assert {f["path"] for f in got} == {
        "veomni/models/transformers/gadget/generated/patched_modeling_gadget_npu.py"
    }


def test_noqa_on_project_rule(tree: Path) -> None:
    spec = tree / WIDGET / "widget_gpu_patch_gen_config.py"
    text = spec.read_text().replace("config = PatchConfig(", "config = PatchConfig(  # noqa: NPU501")
    spec.write_text(text)
    assert not [f for f in _findings(tree, "NPU501") if f["code"] == "NPU501"]


def test_package_memo_sees_a_created_npu_spec(tmp_path) -> None:  # noqa: ANN001
    """The language server lives long: after an NPU spec is created, NPU504/505 must see it."""
    from npu_lint.rules.packaging._shared import packages

    pkg = tmp_path / "toy"
    pkg.mkdir()
    gpu = pkg / "toy_gpu_patch_gen_config.py"
    gpu.write_text("config = None\n", encoding="utf-8")
    paths = [str(gpu)]
    assert [p.npu_specs for p in packages(paths)] == [[]]
    (pkg / "toy_npu_patch_gen_config.py").write_text("config = None\n", encoding="utf-8")
    assert [len(p.npu_specs) for p in packages(paths)] == [1]


def test_npu502_says_the_npu_module_must_be_generated_first(tree: Path) -> None:
    """`widget` has no NPU spec: the message and the fix title say `patched_modeling_widget_npu` does not exist
    yet (NPU501's spec, then patchgen), and the fix is never applied by a safe `--fix`."""
    res = run("check", "--no-cache", "--select", "NPU502", "--output-format", "json", "veomni", cwd=tree)
    diags = [d for d in json.loads(res.stdout) if "/widget/" in d["filename"].replace("\\", "/")]
    assert diags
    for d in diags:
        assert "`patched_modeling_widget_npu` does not exist yet" in d["message"], d["message"]
        assert "widget_npu_patch_gen_config.py` (NPU501)" in d["message"]
        assert "generate it first" in d["fix"]["message"]
        assert d["fix"]["applicability"] != "safe"
