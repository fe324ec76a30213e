"""``npu-lint audit MODEL_DIR``: the migration inventory of one VeOmni model package, before any edit.

Static, like the linter: files present and missing (GPU/NPU spec, generated files and diffs, the ``__init__``
switch, tests), which existing files are reused unchanged and why, a per-op table (op, variant, GPU and NPU
implementations in the registry, action), GPU-only dependencies classified, findings by rule (every rule the
engine has, run on the package's files), ordered implementation steps, and the migration completion checklist.
With ``--base REV`` it lists files changed since REV that fall outside a model migration's scope.

Output: markdown (default) or ``--format json`` (the same data). Exit code 0 when every checklist item passes,
1 when an item fails or is unknown, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from npu_lint.audit.checklist import (
    CHECKLIST,
    FAIL,
    NOT_ATTAINABLE,
    OUT_OF_SCOPE,
    PASS,
    UNKNOWN,
    AuditFacts,
    build_checklist,
    changed_since,
    valid_revision,
)
from npu_lint.audit.inventory import (
    MAX_AUDIT_FILES,
    AuditError,
    build_inventory,
    build_reuse,
    lint_package,
    read_package,
)
from npu_lint.audit.plan import build_op_table, build_steps, dependencies
from npu_lint.audit.render import render_markdown

__all__ = [
    "CHECKLIST",
    "EXIT_ERROR",
    "EXIT_FAIL",
    "EXIT_OK",
    "FAIL",
    "MAX_AUDIT_FILES",
    "NOT_ATTAINABLE",
    "OUT_OF_SCOPE",
    "PASS",
    "UNKNOWN",
    "AuditError",
    "build_audit",
    "changed_since",
    "is_model_dir",
    "render_markdown",
    "run_audit",
    "valid_revision",
]

EXIT_OK, EXIT_FAIL, EXIT_ERROR = 0, 1, 2


def build_audit(model_dir: str, base: str | None = None) -> dict[str, Any]:
    """The audit of one model package as a dict (the JSON output; :func:`render_markdown` renders it)."""
    pkg = read_package(model_dir)
    inventory = build_inventory(pkg)
    lint = lint_package(pkg)
    reuse = build_reuse(pkg, inventory, lint)
    op_table, rows_source = build_op_table(pkg, lint)
    deps = dependencies(pkg.py_files, pkg.root, lint.project)
    changed, scope_error = changed_since(pkg.root, base) if base else (None, "")
    facts = AuditFacts(pkg, lint, inventory, op_table, deps, changed, scope_error)
    checklist = build_checklist(facts)
    return {
        "model": pkg.model,
        "model_dir": model_dir,
        "veomni_root": str(pkg.vroot) if pkg.vroot else None,
        "registry_rows": rows_source,
        "files": inventory,
        "reuse": reuse,
        "ops": op_table,
        "dependencies": deps,
        "findings": lint.findings,
        "findings_total": len(lint.diags),
        "generated_copies": lint.generated_copies,
        "rules_run": len(lint.rules),
        "errors": lint.errors,
        "changed_since_base": changed,
        "base": base,
        "steps": build_steps(facts, checklist),
        "checklist": checklist,
    }


def is_model_dir(path: Path) -> bool:
    """A model package: a patch spec, a ``generated/`` directory or a ``modeling_*.py`` directly inside it."""
    try:
        names = [e.name for e in os.scandir(path)]
    except OSError:
        return False
    return any(
        n.endswith("_patch_gen_config.py")
        or n == "generated"
        or (n.startswith("modeling_") and n.endswith(".py"))
        for n in names
    )


def run_audit(args: argparse.Namespace) -> int:
    model_dir = Path(args.model_dir)
    if not model_dir.is_dir():
        print(f"npu-lint audit: {args.model_dir}: not a directory", file=sys.stderr)
        return EXIT_ERROR
    if not is_model_dir(model_dir):
        print(
            f"npu-lint audit: {args.model_dir} is not a model package (no *_patch_gen_config.py, generated/ or "
            "modeling_*.py): give a directory such as veomni/models/transformers/<model>",
            file=sys.stderr,
        )
        return EXIT_ERROR
    base = getattr(args, "base", None)
    if base is not None and not valid_revision(base):
        print(
            f"npu-lint audit: --base {base!r} is not a revision (a revision never starts with `-` and has no "
            "spaces or control characters)",
            file=sys.stderr,
        )
        return EXIT_ERROR
    try:
        report = build_audit(str(model_dir), base=base)
    except AuditError as exc:
        print(f"npu-lint audit: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if getattr(args, "format", "markdown") == "json":
        import json

        text = json.dumps(report, indent=2) + "\n"
    else:
        text = render_markdown(report)
    output = getattr(args, "output_file", None)
    if output:
        from npu_lint.engine.write import output_refusal, write_output

        why = output_refusal(output)
        if why:
            refusing = "refusing to replace it" if os.path.lexists(output) else "refusing to write it"
            print(f"npu-lint audit: cannot write {output}: {why}; {refusing}", file=sys.stderr)
            return EXIT_ERROR
        try:  # never replaces a device, FIFO or symlink
            write_output(output, text)
        except OSError as exc:
            print(f"npu-lint audit: cannot write {output}: {exc.strerror or exc}", file=sys.stderr)
            return EXIT_ERROR
    else:
        sys.stdout.write(text)
    return EXIT_OK if all(c["status"] in (PASS, NOT_ATTAINABLE) for c in report["checklist"]) else EXIT_FAIL
