"""NPU234 installer-never-called."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

from npu_lint.core.safeio import MAX_SMALL_BYTES, read_text
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.layout import find_veomni_root

# what installs process-wide wiring by its name: ``apply_ops_patch``, ``apply_veomni_attention_patch``,
# ``install_loss_mapping``, ``apply_per_model_patches``
_INSTALLER = re.compile(r"^_?(install_\w+|apply_\w*patch\w*|\w+_install|register_all_\w+)$")


def _called_in_tree(root: str, name: str, skip: str) -> bool:
    """Whether any Python file of the tree (but ``skip``) calls or passes ``name`` on (a word followed by ``(``,
    or used as a value outside an import)."""
    pattern = re.compile(rf"\b{re.escape(name)}\b\s*[(),\]]")
    base = os.path.join(root, "veomni")
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = [d for d in dirnames if d != "__pycache__" and not d.startswith(".")]
        for filename in filenames:
            path = os.path.join(dirpath, filename)
            if not filename.endswith(".py") or os.path.realpath(path) == skip:
                continue
            try:
                text = read_text(path, limit=MAX_SMALL_BYTES)
            except (OSError, UnicodeDecodeError):
                continue
            if name not in text:
                continue
            for line in text.splitlines():
                stripped = line.strip()
                if name in line and not stripped.startswith(("from ", "import ", "#", '"', "'")):
                    if pattern.search(line) and not stripped.startswith(("def ", "async def ")):
                        return True
    return False


class InstallerNeverCalled(Rule):
    code = "NPU234"
    name = "installer-never-called"
    summary = (
        "A package `__init__.py` imports an install function (`apply_ops_patch`, `install_*`, "
        "`apply_*_patch`) and nothing in the tree calls it: the rows, adapters or patches it installs never "
        "take effect."
    )
    why = (
        "VeOmni wires its operators at import time: importing `veomni.ops` registers the kernel rows and then "
        "calls `apply_ops_patch()`, which puts the `veomni_*` attention adapters (the SP-aware flash attention "
        "an Ascend run selects) on `ALL_ATTENTION_FUNCTIONS`; model packages call their `apply_*_patch` on the "
        "module they imported. When the call is lost and only the import (or the `__all__` entry) remains, "
        "nothing fails: attention lookups fall back to the modeling file's eager attention, patched functions "
        "stay unpatched, and the NPU kernels are silently unused. The rule reports an install function a "
        "package `__init__.py` imports and never calls, when no other module of the tree calls it either."
    )
    bad = (
        Example(
            """
            from . import kernels as _op_families  # noqa: F401
            from .install import apply_ops_patch
            from .registry import OP_REGISTRY, VeomniOp, register_op

            __all__ = ["OP_REGISTRY", "VeomniOp", "apply_ops_patch", "register_op"]
            """,
            path="veomni/ops/__init__.py",
            title="the install call dropped, the import kept",
        ),
    )
    good = (
        Example(
            """
            from . import kernels as _op_families  # noqa: F401
            from .install import apply_ops_patch
            from .registry import OP_REGISTRY, VeomniOp, register_op

            apply_ops_patch()

            __all__ = ["OP_REGISTRY", "VeomniOp", "apply_ops_patch", "register_op"]
            """,
            path="veomni/ops/__init__.py",
        ),
    )
    fix_safety = "No fix: call the installer where the package is imported (or where the tree expects it)."
    node_types = ()
    requires = (("install", "patch", "register_all"),)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test and os.path.basename(ctx.source.path) == "__init__.py"

    def finish(self) -> None:
        tree = self.ctx.tree
        imported: dict[str, ast.ImportFrom] = {}
        for stmt in tree.body:
            if isinstance(stmt, ast.ImportFrom) and (stmt.level or (stmt.module or "").startswith("veomni")):
                for alias in stmt.names:
                    local = alias.asname or alias.name
                    if _INSTALLER.match(alias.name):
                        imported[local] = stmt
        if not imported:
            return
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        used |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        root = find_veomni_root(Path(self.ctx.source.path))
        for local, stmt in sorted(imported.items()):
            if local in used:
                continue
            if root is None or _called_in_tree(str(root), local, os.path.realpath(self.ctx.source.path)):
                continue
            self.report(
                stmt,
                f"`{local}` is imported here and called nowhere in the tree: what it installs (kernel rows, "
                "attention adapters, patches) never takes effect and the lookups fall back silently; call it "
                "when the package is imported",
            )
