"""The fix invariant on the real veomni==0.1.12 wheel (an OpSlot-generation tree), through the CLI.

After ``check --fix --unsafe-fixes`` on a copy of the whole tree under ``target-api = "auto"``, every name that a
changed or created file imports from ``veomni`` resolves statically in the tree (``ModuleIndex``), and no file
imports ``VeomniOp`` (the tree has no such API: NPU201-203 say what the migration needs and offer no fix).
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from npu_lint.veomni.imports import ModuleIndex, veomni_imports
from npu_lint.veomni.patchgen import produced_by_spec
from tests.corpus import veomni_wheel_root


def generated_later(root: Path, module: str) -> bool:
    """``<package>.generated.<stem>``: output of one of the package's specs (e.g. the `_npu` module of the NPU
    spec the fix created), which exists once the package is regenerated."""
    parts = module.split(".")
    return (
        len(parts) > 2
        and parts[-2] == "generated"
        and produced_by_spec(str(root.joinpath(*parts[:-2])), parts[-1])
    )


pytestmark = pytest.mark.corpus


def test_every_import_a_fix_adds_resolves_in_the_wheel(tmp_path: Path) -> None:
    source = veomni_wheel_root()
    tree = tmp_path / "wheel"
    shutil.copytree(source / "veomni", tree / "veomni")
    before = {p.relative_to(tree): p.read_text(encoding="utf-8") for p in tree.rglob("*.py")}
    proc = subprocess.run(
        [sys.executable, "-m", "npu_lint", "check", "--no-cache", "--fix", "--unsafe-fixes", "--exit-zero", "veomni"],
        cwd=tree, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "internal error" not in proc.stderr
    index = ModuleIndex(tree)
    changed = 0
    unresolved: list[str] = []
    for path in sorted(tree.rglob("*.py")):
        rel = path.relative_to(tree)
        text = path.read_text(encoding="utf-8")
        if before.get(rel) == text:
            continue
        changed += 1
        for module, name in sorted(veomni_imports(ast.parse(text), str(path))):
            assert name != "VeomniOp", f"{rel} imports VeomniOp, which this tree does not define"
            ok = index.has_module(module) if not name else index.defines(module, name)
            ok = ok or generated_later(tree, module)
            if not ok:
                unresolved.append(f"{rel}: from {module} import {name}")
    assert changed > 0  # the fixes did something (device helpers, NPU sibling specs)
    assert unresolved == []
