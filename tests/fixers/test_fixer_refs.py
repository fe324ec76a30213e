"""Rules name their fixers directly, by the fixer function's dotted path ("npu_lint.fixers.<module>:<function>"):
every such reference in the package resolves to a function, and nothing else names a fixer."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

import npu_lint
from npu_lint.core.diagnostics import is_fixer_ref
from npu_lint.fixers import resolve

PKG = Path(npu_lint.__file__).parent


def _references() -> dict[str, list[str]]:
    """Every string literal of the package that looks like a fixer reference -> where it is."""
    found: dict[str, list[str]] = {}
    for path in sorted(PKG.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and is_fixer_ref(node.value):
                found.setdefault(node.value, []).append(f"{path.relative_to(PKG.parent)}:{node.lineno}")
    return found


def test_every_fixer_reference_resolves() -> None:
    refs = _references()
    # the dispatch migration (NPU201-203, NPU207, NPU208, NPU303) and the project rules' fixers (NPU501, NPU502,
    # NPU504)
    assert {
        "npu_lint.fixers.dispatch:build_migration_fix",
        "npu_lint.fixers.npu_spec:build_npu_spec",
        "npu_lint.fixers.npu_spec:format_many",
        "npu_lint.fixers.npu_spec:reuse_gpu_patch_edits",
        "npu_lint.fixers.init_switch:flag_import_edit",
        "npu_lint.fixers.init_switch:switch_edit",
    } <= set(refs)
    for ref, where in refs.items():
        assert inspect.isfunction(resolve(ref)), (ref, where)


def _is_ref_literal(node: ast.expr, constants: dict[str, str]) -> bool:
    if isinstance(node, ast.Constant):
        return is_fixer_ref(node.value)
    return isinstance(node, ast.Name) and is_fixer_ref(constants.get(node.id))


def test_rules_name_fixers_only_by_reference() -> None:
    """``ProjectRule.fixer(...)`` and ``Fix(..., builder=...)`` in rule modules take a literal reference (or a
    module constant holding one): no registry key, no computed name."""
    checked = 0
    for path in sorted((PKG / "rules").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        constants = {
            t.id: n.value.value
            for n in tree.body
            if isinstance(n, ast.Assign)
            and isinstance(n.value, ast.Constant)
            and isinstance(n.value.value, str)
            for t in n.targets
            if isinstance(t, ast.Name)
        }
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            if isinstance(node.func, ast.Attribute) and node.func.attr == "fixer":
                assert len(node.args) == 1 and _is_ref_literal(node.args[0], constants), (path, node.lineno)
                checked += 1
            for kw in node.keywords:
                if kw.arg == "builder" and not (
                    isinstance(kw.value, ast.Constant) and kw.value.value is None
                ):
                    assert _is_ref_literal(kw.value, constants), (path, node.lineno)
                    checked += 1
    assert checked >= 6


@pytest.mark.parametrize(
    "ref",
    [
        "dispatch-migration",  # a registry key (the former indirection)
        "os:system",  # outside npu_lint.fixers
        "npu_lint.engine.lint:lint_file",
        "npu_lint.fixers.dispatch",  # no function
        "npu_lint.fixers.dispatch:build_migration_fix:x",
    ],
)
def test_resolve_refuses_what_is_not_a_fixer_reference(ref: str) -> None:
    with pytest.raises(ValueError, match="not a fixer reference"):
        resolve(ref)


def test_resolve_reports_a_missing_fixer() -> None:
    with pytest.raises(AttributeError):
        resolve("npu_lint.fixers.dispatch:no_such_builder")
    with pytest.raises(ModuleNotFoundError):
        resolve("npu_lint.fixers.no_such_module:build")


def test_a_cached_fix_naming_its_fixer_by_a_registry_key_is_not_believed() -> None:
    """A cache entry written before fixers were referenced directly (``builder="dispatch-migration"``) fails the
    cache's schema check (the file is linted again) instead of reaching ``resolve`` in fix mode."""
    from npu_lint.core.diagnostics import Applicability, Fix
    from npu_lint.engine.cache import _check_fix

    fix = Fix(
        "Migrate",
        (),
        Applicability.UNSAFE,
        (),
        "",
        deferred=True,
        builder="npu_lint.fixers.dispatch:build_migration_fix",
    )
    assert _check_fix(fix.to_json())
    stale = {**fix.to_json(), "builder": "dispatch-migration"}
    assert not _check_fix(stale)
