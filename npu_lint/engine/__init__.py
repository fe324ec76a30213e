"""The engine: lint files (one parse, one walk, suppressions, cache, pool), project rules, fixes, writes.

Front ends (cli, lsp, audit) import from here; the engine imports rules and fixers, never the reverse."""

from npu_lint.engine.cache import Cache
from npu_lint.engine.fix import FixOutcome, TreeFix, apply_edits, fix_applicable, fix_source, fix_tree, parses
from npu_lint.engine.lint import (
    GENERATED_FIX_REASON,
    SYNTAX_CODE,
    FileResult,
    InternalError,
    build_deferred_fixes,
    check_source,
    lint_path,
    lint_source,
    read_source,
)
from npu_lint.engine.passes import fix_until_stable, merge_fixes, staged_passes
from npu_lint.engine.pool import ProjectJob, lint_paths, project_diagnostics
from npu_lint.engine.suppress import apply_suppressions, file_suppression, noqa_codes, per_file_ignored
from npu_lint.engine.walk import rule_classes
from npu_lint.engine.write import write_atomic

__all__ = [
    "GENERATED_FIX_REASON",
    "SYNTAX_CODE",
    "Cache",
    "FileResult",
    "FixOutcome",
    "InternalError",
    "ProjectJob",
    "apply_edits",
    "apply_suppressions",
    "build_deferred_fixes",
    "check_source",
    "file_suppression",
    "fix_applicable",
    "fix_source",
    "fix_tree",
    "fix_until_stable",
    "merge_fixes",
    "staged_passes",
    "TreeFix",
    "lint_path",
    "lint_paths",
    "lint_source",
    "noqa_codes",
    "parses",
    "project_diagnostics",
    "per_file_ignored",
    "read_source",
    "rule_classes",
    "write_atomic",
]
