"""The engine: lint files (one parse, one walk, suppressions, cache, pool), project rules, fixes, writes.

Front ends (cli, lsp, audit) import from here; the engine imports rules and fixers, never the reverse. The names are
imported from their modules at first use (PEP 562 ``__getattr__``): a warm ``check`` asks for the cache and the
pool's look-ups only, and does not import the fixer, the formatter or the file pass's analysis modules."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from npu_lint.core.diagnostics import fix_applicable
    from npu_lint.engine.cache import Cache
    from npu_lint.engine.fix import FixOutcome, TreeFix, apply_edits, fix_source, fix_tree, parses
    from npu_lint.engine.lint import (
        GENERATED_FIX_REASON,
        SYNTAX_CODE,
        build_deferred_fixes,
        check_source,
        lint_path,
        lint_source,
        read_source,
    )
    from npu_lint.engine.passes import fix_until_stable, merge_fixes, staged_passes
    from npu_lint.engine.pool import ProjectJob, lint_paths, project_diagnostics
    from npu_lint.engine.result import FileResult, InternalError
    from npu_lint.engine.suppress import apply_suppressions, file_suppression, noqa_codes, per_file_ignored
    from npu_lint.engine.walk import rule_classes
    from npu_lint.engine.write import write_atomic

# name -> the module it is imported from at first use: the one table of the package's names
_SUBMODULE = {
    "apply_edits": "npu_lint.engine.fix",
    "apply_suppressions": "npu_lint.engine.suppress",
    "build_deferred_fixes": "npu_lint.engine.lint",
    "Cache": "npu_lint.engine.cache",
    "check_source": "npu_lint.engine.lint",
    "file_suppression": "npu_lint.engine.suppress",
    "FileResult": "npu_lint.engine.result",
    "fix_applicable": "npu_lint.core.diagnostics",
    "fix_source": "npu_lint.engine.fix",
    "fix_tree": "npu_lint.engine.fix",
    "fix_until_stable": "npu_lint.engine.passes",
    "FixOutcome": "npu_lint.engine.fix",
    "GENERATED_FIX_REASON": "npu_lint.engine.lint",
    "InternalError": "npu_lint.engine.result",
    "lint_path": "npu_lint.engine.lint",
    "lint_paths": "npu_lint.engine.pool",
    "lint_source": "npu_lint.engine.lint",
    "merge_fixes": "npu_lint.engine.passes",
    "noqa_codes": "npu_lint.engine.suppress",
    "parses": "npu_lint.engine.fix",
    "per_file_ignored": "npu_lint.engine.suppress",
    "project_diagnostics": "npu_lint.engine.pool",
    "ProjectJob": "npu_lint.engine.pool",
    "read_source": "npu_lint.engine.lint",
    "rule_classes": "npu_lint.engine.walk",
    "staged_passes": "npu_lint.engine.passes",
    "SYNTAX_CODE": "npu_lint.engine.lint",
    "TreeFix": "npu_lint.engine.fix",
    "write_atomic": "npu_lint.engine.write",
}


def __getattr__(name: str) -> Any:
    """``npu_lint.engine.<name>`` imported from its module at first use, then kept on the package."""
    module = _SUBMODULE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


# the public names: the table's (a literal for the linters; tests/test_engine_exports.py checks that the
# ``TYPE_CHECKING`` imports, the table and this list name the same names)
__all__ = [
    "Cache",
    "FileResult",
    "FixOutcome",
    "GENERATED_FIX_REASON",
    "InternalError",
    "ProjectJob",
    "SYNTAX_CODE",
    "TreeFix",
    "apply_edits",
    "apply_suppressions",
    "build_deferred_fixes",
    "check_source",
    "file_suppression",
    "fix_applicable",
    "fix_source",
    "fix_tree",
    "fix_until_stable",
    "lint_path",
    "lint_paths",
    "lint_source",
    "merge_fixes",
    "noqa_codes",
    "parses",
    "per_file_ignored",
    "project_diagnostics",
    "read_source",
    "rule_classes",
    "staged_passes",
    "write_atomic",
]
