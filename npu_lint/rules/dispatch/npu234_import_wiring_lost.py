"""NPU234 import-wiring-lost."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

from npu_lint.core.astutil import call_name
from npu_lint.core.safeio import MAX_SMALL_BYTES, read_text
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni import patchgen, scanstore
from npu_lint.veomni.layout import find_veomni_root
from npu_lint.veomni.registry import read_registry_tree

# what installs process-wide wiring by its name: ``apply_ops_patch``, ``apply_veomni_attention_patch``,
# ``install_loss_mapping``, ``apply_per_model_patches``
_INSTALLER = re.compile(r"^_?(install_\w+|apply_\w*patch\w*|\w+_install|register_all_\w+)$")


_REGISTER_TEXT = ("register_op(", "register_kernel(", "KernelSpec(")


def _tree_files(ctx: Context, root: Path) -> tuple[str, ...]:
    """The tree's ``veomni/**/*.py``: the project's one listing when the project is this tree, else one walk."""
    project = ctx.project
    if (
        project.root is not None
        and os.path.realpath(project.root) == os.path.realpath(root)
        and project.tree_files
    ):
        return project.tree_files
    return tuple(str(path) for path, _parts in scanstore.list_tree(root).files)


def _registers(path: str, files: tuple[str, ...]) -> bool:
    """Whether the module (a file, or a package and its modules) registers rows at module level."""
    if path.endswith(".py"):
        chosen = [path]
    else:
        prefix = os.path.join(path, "")
        chosen = [f for f in files if f.startswith(prefix)]
    for file in chosen:
        try:
            text = read_text(file, limit=MAX_SMALL_BYTES)
        except (OSError, UnicodeDecodeError):
            continue
        if not any(marker in text for marker in _REGISTER_TEXT):
            continue
        parsed = patchgen.load_file(file)
        if parsed is None or parsed.tree is None:
            continue
        ops, slots, _where = read_registry_tree(parsed.tree)
        if ops or slots:
            return True
    return False


def _top_level_imports(
    root: str, names: frozenset[str], files: tuple[str, ...]
) -> frozenset[tuple[str, str]]:
    """The absolute modules the tree's files import at module level (not inside functions or classes): for
    ``from pkg import name`` both ``pkg`` and ``pkg.name``; each with the importing module. Only files whose
    text names one of ``names`` (the modules asked about) are parsed. Asked once per project."""
    out: set[tuple[str, str]] = set()
    for file in files:
        try:
            text = read_text(file, limit=MAX_SMALL_BYTES)
        except (OSError, UnicodeDecodeError):
            continue
        if "import" not in text or not any(name in text for name in names):
            continue
        parsed = patchgen.load_file(file)
        if parsed is None or parsed.tree is None:
            continue
        module = patchgen.module_of(file) or ""
        package = module if os.path.basename(file) == "__init__.py" else module.rpartition(".")[0]
        found: set[str] = set()
        _module_imports(parsed.tree.body, package, found, module)
        out.update((module, m) for m in found)
    return frozenset(out)


def _dynamic_imports(stmt: ast.stmt, package: str, module: str, out: set[str]) -> None:
    """``importlib.import_module(...)`` at module level: a literal name (relative ones against ``package=``), or
    a loop over literal names (``for fam in ("rope", "moe"): import_module(f"{__name__}.{fam}")``)."""
    loop_values: list[str] = []
    var = None
    if isinstance(stmt, ast.For) and isinstance(stmt.target, ast.Name):
        if isinstance(stmt.iter, (ast.Tuple, ast.List, ast.Set)):
            loop_values = [
                e.value for e in stmt.iter.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)
            ]
            var = stmt.target.id
    for node in ast.walk(stmt):
        if not (isinstance(node, ast.Call) and call_name(node) == "import_module" and node.args):
            continue
        arg = node.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            name = arg.value
            out.add(f"{package}{name}" if name.startswith(".") else name)
        elif var is not None:
            text = ast.unparse(arg)
            for value in loop_values:
                if isinstance(arg, ast.Name) and arg.id == var:
                    out.add(value)
                elif isinstance(arg, ast.JoinedStr) and "{" + var + "}" in text:
                    head = module if "{__name__}" in text else package if "{__package__}" in text else ""
                    if head:
                        out.add(f"{head}.{value}")


def _module_imports(body: list[ast.stmt], package: str, out: set[str], module: str = "") -> None:
    for stmt in body:
        if isinstance(stmt, ast.Import):
            out.update(a.name for a in stmt.names)
        elif isinstance(stmt, ast.ImportFrom):
            if stmt.level:
                parts = package.split(".")
                head = ".".join(parts[: len(parts) - (stmt.level - 1)]) if stmt.level > 1 else package
                base = f"{head}.{stmt.module}" if stmt.module else head
            else:
                base = stmt.module or ""
            out.add(base)
            out.update(f"{base}.{a.name}" for a in stmt.names)
        elif isinstance(stmt, (ast.Expr, ast.For)):
            _dynamic_imports(stmt, package, module, out)
        elif isinstance(stmt, (ast.If, ast.Try, ast.With)):
            _module_imports(stmt.body, package, out, module)
            _module_imports(getattr(stmt, "orelse", []), package, out, module)
            _module_imports(getattr(stmt, "finalbody", []), package, out, module)
            for handler in getattr(stmt, "handlers", []):
                _module_imports(handler.body, package, out, module)


def _calls(text: str, name: str) -> bool:
    """Whether a file's text calls or passes ``name`` on (a word followed by ``(``, or used as a value outside an
    import), directly or through an import alias (``from .ops import apply_ops_patch as _apply``)."""
    names = [name] + re.findall(rf"\b{re.escape(name)}\s+as\s+(\w+)", text)
    for spelled in names:
        pattern = re.compile(rf"\b{re.escape(spelled)}\b\s*[(),\]]")
        for line in text.splitlines():
            stripped = line.strip()
            if spelled in line and not stripped.startswith(("from ", "import ", "#", '"', "'")):
                if pattern.search(line) and not stripped.startswith(("def ", "async def ")):
                    return True
    return False


# the places an entry script calls the tree's installers from, beside the package itself (`tasks/train.py`)
_ENTRY_SKIP = frozenset({"veomni", "tests", "test", "docs", "node_modules", "build", "dist", "site-packages"})


def _entry_scripts(root: str) -> list[str]:
    """The Python files of the checkout outside ``veomni/`` (entry scripts: ``tasks/``, ``scripts/``...)."""
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(
            d for d in dirnames if d not in _ENTRY_SKIP and not d.startswith((".", "_")) and "venv" not in d
        )
        out.extend(os.path.join(dirpath, f) for f in sorted(filenames) if f.endswith(".py"))
    return out


def _called_in_tree(root: str, files: tuple[str, ...], name: str, skip: str) -> bool:
    """Whether any Python file of the tree (but ``skip``), or an entry script of the checkout, calls ``name``."""
    for group in (files, None):
        for path in group if group is not None else _entry_scripts(root):
            if os.path.realpath(path) == skip:
                continue
            try:
                text = read_text(path, limit=MAX_SMALL_BYTES)
            except (OSError, UnicodeDecodeError):
                continue
            if name in text and _calls(text, name):
                return True
    return False


class ImportWiringLost(Rule):
    code = "NPU234"
    name = "import-wiring-lost"
    summary = (
        "A step of a package's import-time wiring is lost: its `__init__.py` imports an install function "
        "(`apply_ops_patch`, `install_*`, `apply_*_patch`) that nothing in the tree calls, or a child module "
        "that registers kernel rows when imported is imported by nothing at import time."
    )
    why = (
        "VeOmni wires its operators at import time: importing `veomni.ops` registers the kernel rows and then "
        "calls `apply_ops_patch()`, which puts the `veomni_*` attention adapters (the SP-aware flash attention "
        "an Ascend run selects) on `ALL_ATTENTION_FUNCTIONS`; model packages call their `apply_*_patch` on the "
        "module they imported. When the call is lost and only the import (or the `__all__` entry) remains, "
        "nothing fails: attention lookups fall back to the modeling file's eager attention, patched functions "
        "stay unpatched, and the NPU kernels are silently unused. The rule reports an install function a "
        "package `__init__.py` imports and never calls, when no other module of the tree calls it either."
        " The rows themselves are registered by importing their modules (`veomni/ops/kernels/<family>/__init__.py` "
        "calls `register_op(...)` at module level; `veomni.ops` imports `kernels`, which imports every family). "
        "A family dropped from that chain -- and imported elsewhere only inside functions, at call time -- leaves "
        "its rows, NPU ones included, unregistered when the handles resolve: KeyError at model build, or the "
        "slot stays on eager. The rule reports, in a package `__init__.py`, each child module or package that "
        "registers rows at module level and that no module of the tree imports at module level."
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
    requires = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test and os.path.basename(ctx.source.path) == "__init__.py"

    def finish(self) -> None:
        self._installers()
        self._registering_children()

    def _registering_children(self) -> None:
        path = os.path.abspath(self.ctx.source.path)
        package = os.path.dirname(path)
        root = find_veomni_root(Path(path))
        module = patchgen.module_of(path)
        if root is None or module is None:
            return
        children: list[tuple[str, str]] = []  # (child name, its path)
        try:
            entries = sorted(os.listdir(package))
        except OSError:
            return
        for entry in entries:
            full = os.path.join(package, entry)
            if entry.endswith(".py") and entry != "__init__.py":
                children.append((entry[:-3], full))
            elif os.path.isfile(os.path.join(full, "__init__.py")) and not entry.startswith((".", "_")):
                children.append((entry, full))
        files = _tree_files(self.ctx, root)
        registering = [(name, full) for name, full in children if _registers(full, files)]
        if not registering:
            return
        names = frozenset(name for name, _full in registering)
        imported = self.ctx.project.remember(
            ("NPU234.imports", str(root), names, files), lambda: _top_level_imports(str(root), names, files)
        )
        for name, _full in registering:
            child = f"{module}.{name}"
            if any(
                (m == child or m.startswith(child + "."))
                and not (importer == child or importer.startswith(child + "."))
                for importer, m in imported
            ):
                continue
            body = self.ctx.tree.body
            at = next(
                (s for s in body if isinstance(s, (ast.Import, ast.ImportFrom))), body[0] if body else None
            )
            self.report(
                at if at is not None else (1, 0, 1, 0),
                f"`{child}` registers kernel rows when it is imported, and no module of the tree imports it at "
                f"import time (here or elsewhere; imports inside functions run too late): its rows are missing "
                f"when handles resolve; import it here (`from . import {name}`)",
            )

    def _installers(self) -> None:
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
            if root is None or _called_in_tree(
                str(root), _tree_files(self.ctx, root), local, os.path.realpath(self.ctx.source.path)
            ):
                continue
            self.report(
                stmt,
                f"`{local}` is imported here and called nowhere in the tree: what it installs (kernel rows, "
                "attention adapters, patches) never takes effect and the lookups fall back silently; call it "
                "when the package is imported",
            )
