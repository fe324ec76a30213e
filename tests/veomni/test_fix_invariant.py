"""The fix invariant: no fix adds an import of a module or name that the tree does not define.

Every fixer runs (``--fix --unsafe-fixes``, every rule) on a copy of each fixture tree (generation x layout),
for each target-api; every ``veomni`` import of every changed or created file must resolve statically in the
fixed tree (``ModuleIndex``). A fix that would add an unresolvable import is display-only with its reason.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.diagnostics import Applicability, Edit, Fix
from npu_lint.engine.guard import guard_fixes, import_problem
from npu_lint.veomni.imports import ModuleIndex, veomni_imports
from npu_lint.veomni.patchgen import produced_by_spec
from npu_lint.veomni.project import Project, load_project


def generated_later(root: Path, module: str) -> bool:
    """``<package>.generated.<stem>``: output of one of the package's specs (e.g. the `_npu` module of the NPU
    spec the fix created), which exists once the package is regenerated."""
    parts = module.split(".")
    return (
        len(parts) > 2
        and parts[-2] == "generated"
        and produced_by_spec(str(root.joinpath(*parts[:-2])), parts[-1])
    )


TREES = Path(__file__).resolve().parent.parent / "fixtures" / "trees"
FIXTURES = (
    "op_slot_models",
    "veomni_op_models_kernel",
    "veomni_kernel_models_kernel",
    "veomni_op_ops_config",
)


def _plant_examples(tree: Path) -> int:
    """Every file rule's bad examples, written into the tree's model package (generated ones excepted: their
    fixes are display-only), so every fixer has something to fix."""
    from npu_lint.rules.base import REGISTRY, load_rule_modules

    load_rule_modules()
    package = next(p.parent for p in tree.rglob("*_gpu_patch_gen_config.py"))
    count = 0
    for code, rule in sorted(REGISTRY.items()):
        if code == "NPU001":
            continue
        for i, example in enumerate(rule.bad):
            name = Path(example.path).name
            if "generated" in Path(example.path).parts or not name.endswith(".py") or name == "__init__.py":
                continue
            (package / f"x{code.lower()}_{i}_{name}").write_text(example.source, encoding="utf-8")
            count += 1
    return count


def _snapshot(root: Path) -> dict[Path, str]:
    return {p: p.read_text(encoding="utf-8") for p in root.rglob("*.py")}


def unresolved_imports(root: Path, before: dict[Path, str]) -> list[str]:
    """Every veomni import of a file the fix changed or created that does not resolve in the tree."""
    index = ModuleIndex(root)
    bad = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if before.get(path) == text:
            continue
        old = veomni_imports(ast.parse(before[path]), str(path)) if path in before else set()
        for module, name in sorted(veomni_imports(ast.parse(text), str(path)) - old):
            ok = index.has_module(module) if not name else index.defines(module, name)
            ok = ok or generated_later(root, module)
            if not ok:
                bad.append(f"{path.relative_to(root)}: from {module} import {name}")
    return bad


@pytest.mark.parametrize("target_api", ["auto", "op-slot", "veomni-op", "veomni-kernel"])
@pytest.mark.parametrize("fixture", FIXTURES)
def test_every_fix_imports_only_what_the_tree_defines(tmp_path: Path, fixture: str, target_api: str) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(TREES / fixture, tree)
    (tree / "npu-lint.toml").write_text(f'target-api = "{target_api}"\n')
    assert _plant_examples(tree) > 20
    before = _snapshot(tree)
    proc = subprocess.run(
        [sys.executable, "-m", "npu_lint", "check", "--no-cache", "--select", "ALL", "--fix", "--unsafe-fixes",
         "--exit-zero", "."],
        cwd=tree, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "internal error" not in proc.stderr
    assert unresolved_imports(tree, before) == []


def test_a_fix_adding_an_unresolvable_import_is_display_only(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(TREES / "op_slot_models", tree)
    project = load_project([str(tree)], Settings())
    path = str(tree / "veomni" / "models" / "transformers" / "toy" / "modeling_toy.py")
    text = "import torch\n"
    ok = Fix("add a device helper", (Edit(0, 0, "from veomni.utils.device import get_device_type\n"),))
    bad = Fix("add a handle", (Edit(0, 0, "from veomni.ops import VeomniOp\n"),), Applicability.UNSAFE)
    assert import_problem(path, text, None, ok, project) is None
    problem = import_problem(path, text, None, bad, project)
    assert problem is not None and "VeomniOp" in problem and "does not define" in problem

    from npu_lint.core.diagnostics import Diagnostic

    diag = Diagnostic("NPU999", "x", "m", path, 1, 0, 1, 0, fix=bad)
    (guarded,) = guard_fixes(path, text, None, [diag], project)
    assert guarded.fix is not None and guarded.fix.applicability is Applicability.DISPLAY
    assert "VeomniOp" in guarded.fix.reason


def test_out_of_a_tree_another_generations_api_is_refused() -> None:
    project = Project(generation="op-slot")
    fix = Fix("t", (Edit(0, 0, "from veomni.models_kernel.utils.op_utils import resolve_op_impl\n"),))
    assert "resolve_op_impl" in (import_problem("m.py", "", None, fix, project) or "")
    assert import_problem("m.py", "", None, fix, Project()) is None  # the built-in VeomniOp profile has it


def test_out_of_a_tree_a_safe_fix_that_imports_veomni_is_unsafe() -> None:
    """Outside any VeOmni tree an added ``veomni`` import comes from the built-in catalog, which no tree vouches for:
    the fix is kept but never safe (adversary round 7, A7-21). A fix adding no ``veomni`` import stays safe, and
    inside a tree the same import is checked against the tree instead."""
    from npu_lint.core.diagnostics import Diagnostic

    project = Project()
    adds = Fix("switch", (Edit(0, 0, "from veomni.utils.device import IS_NPU_AVAILABLE\n"),))
    plain = Fix("device", (Edit(0, 0, "import torch\n"),))
    diags = [Diagnostic("NPU999", "x", "m", "m.py", 1, 0, 1, 0, fix=f) for f in (adds, plain)]
    first, second = guard_fixes("m.py", "x = 1\n", None, diags, project)
    assert first.fix is not None and first.fix.applicability is Applicability.UNSAFE
    assert first.fix.edits == adds.edits and "no VeOmni tree was found" in first.fix.reason
    assert "`IS_NPU_AVAILABLE` from `veomni.utils.device`" in first.fix.reason
    assert second.fix is plain
