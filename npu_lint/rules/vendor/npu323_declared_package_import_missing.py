"""NPU323 declared-package-import-missing."""

from __future__ import annotations

import ast
import os

from npu_lint.core.astutil import dotted_name, nodes_of
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.opdefs import (
    closure_files,
    file_op_definitions,
    import_closure,
    imports_package,
    module_file,
    tree_import_requirements,
    tree_op_definitions,
)


def _extension_ops(tree: ast.Module, defined: set[tuple[str, str]]) -> list[ast.Attribute]:
    """The outermost ``torch.ops.<ns>.<op>`` references of operators the tree does not define (an extension
    package's, registered when that package is imported)."""
    own = {(ns, op) for ns, op, _line in file_op_definitions(tree)}
    out: list[ast.Attribute] = []
    inner: set[int] = set()
    for node in nodes_of(tree, ast.Attribute):
        assert isinstance(node, ast.Attribute)
        if id(node) in inner:
            continue
        parts = (dotted_name(node) or "").split(".")
        if len(parts) >= 4 and parts[:2] == ["torch", "ops"]:
            inner.update(id(n) for n in ast.walk(node) if n is not node)
            if (parts[2], parts[3]) not in defined and (parts[2], parts[3]) not in own:
                out.append(node)
    return out


def _import_block(tree: ast.Module) -> ast.stmt | None:
    """Where a package's side-effect import belongs: the module's last top-level absolute import of a package
    outside the tree (its third-party block)."""
    last: ast.stmt | None = None
    for stmt in tree.body:
        if isinstance(stmt, ast.Import) and not any(a.name.split(".")[0] == "veomni" for a in stmt.names):
            last = stmt
        elif (
            isinstance(stmt, ast.ImportFrom)
            and not stmt.level
            and (stmt.module or "").split(".")[0] not in ("veomni", "__future__")
        ):
            last = stmt
    return last


class DeclaredPackageImportMissing(Rule):
    code = "NPU323"
    name = "declared-package-import-missing"
    summary = (
        "The tree declares that importing one of its modules imports an external package (an `except "
        'ImportError as e: if e.name == "fla_npu"` handler around the import), but nothing that module loads '
        "imports the package any more: the side-effect import that registers its operators was pruned."
    )
    why = (
        "Extension packages for Ascend (and CUDA) kernels often work by side effect: `import fla_npu` registers "
        "`torch.ops.npu.npu_chunk_fwd_o` and its siblings, and the kernel module then calls them through "
        "`torch.ops`, never through the package's names. The import is unused to every linter and kept with a "
        "`# noqa: F401`; a cleanup that drops it leaves a module that imports fine (`torch_npu` still loads) and "
        "fails at the first call (`torch.ops.npu has no attribute ...`), or works only while something else "
        "happened to import the package first. The tree itself states the dependency where it imports the "
        "module lazily: a handler that tests the failed import's `.name` against the package (`e.name in "
        '("fla_npu", "torch_npu")`, to turn a missing install into an actionable error) promises that the '
        "module's import loads it. When no module of that import's closure (the module, its packages' "
        "`__init__`, every tree module they import, transitively) imports the package, the promise is broken. "
        "The finding sits on each module of the closure that calls an operator the tree does not define (on its "
        "third-party import block, where the registration import belongs), and on the handler's test itself. Nothing is read from a built-in "
        "list of packages or operators."
    )
    bad = (
        Example(
            """
            import torch
            import torch_npu


            def chunk_scan(x, decay):
                return torch.ops.npu.npu_chunk_scan(x, decay, chunk_size=64)
            """,
            path="veomni/ops/kernels/toy_scan/_ascend/scan.py",
            title=(
                'the package\'s `__init__` imports this module in `try:` and tests `e.name == "scan_npu"`; '
                "the `import scan_npu  # noqa: F401` was pruned"
            ),
        ),
    )
    good = (
        Example(
            """
            import torch
            import torch_npu

            import scan_npu  # noqa: F401  (registers torch.ops.npu.npu_chunk_scan)


            def chunk_scan(x, decay):
                return torch.ops.npu.npu_chunk_scan(x, decay, chunk_size=64)
            """,
            path="veomni/ops/kernels/toy_scan/_ascend/scan.py",
        ),
    )
    fix_safety = "No fix: restore the side-effect import (`import <package>  # noqa: F401`) in the module that uses it."
    node_types = ()
    requires = (("torch.ops.", "ImportError", "ModuleNotFoundError"),)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def _closure(self, root: str, module: str) -> frozenset[str]:
        """The real paths ``module``'s import loads, once per project (it goes with the project when a file
        changes)."""

        def compute() -> frozenset[str]:
            file = module_file(root, module)
            return frozenset(import_closure(file, root)) if file is not None else frozenset()

        return self.ctx.project.remember(("NPU323.closure", root, module), compute)

    def _loads(self, root: str, module: str, package: str) -> bool:
        """Whether a file of ``module``'s closure imports ``package``: the closure read in order up to the first
        such file (usually the module itself), once per project."""

        def compute() -> bool:
            file = module_file(root, module)
            return file is not None and any(
                imports_package(f, root, package) for f in closure_files(file, root)
            )

        return self.ctx.project.remember(("NPU323.loads", root, module, package), compute)

    def finish(self) -> None:
        root = self.ctx.project.root
        files = self.ctx.project.tree_files
        if root is None or not files:
            return
        project = self.ctx.project
        requirements = project.remember(
            ("opdefs.requirements", root), lambda: tree_import_requirements(files, root)
        )
        if not requirements:
            return
        path = os.path.realpath(os.path.abspath(self.ctx.source.path))
        ops: list[ast.Attribute] | None = None
        reported: set[tuple[str, str]] = set()
        for req in requirements:
            if self._loads(root, req.module, req.package):
                continue  # what the handler says holds (checked below too: the cheap way first)
            handler_here = os.path.realpath(req.file) == path
            closure = self._closure(root, req.module)
            if not closure or (not handler_here and path not in closure):
                continue
            if (req.module, req.package) in reported:
                continue
            if any(imports_package(file, root, req.package) for file in closure):
                continue
            if any(
                other.module != req.module
                and any(imports_package(f, root, req.package) for f in self._closure(root, other.module))
                for other in requirements
                if (other.file, other.line, other.package) == (req.file, req.line, req.package)
            ):
                continue  # another import of the same `try:` loads it (the handler speaks for the block)
            reported.add((req.module, req.package))
            if handler_here:
                if (str(req.line), req.package) in reported:
                    continue  # one finding per handler test, however many of its imports lack the package
                reported.add((str(req.line), req.package))
                test = next(
                    (n for n in nodes_of(self.ctx.tree, ast.Compare) if getattr(n, "lineno", 0) == req.line),
                    None,
                )
                if test is not None:
                    self.report(
                        test,
                        f"this handler says importing `{req.module}` imports `{req.package}`, but no module that "
                        f"import loads imports `{req.package}` any more: the test never matches, and whatever the "
                        f"package registered (`torch.ops.*` operators) is missing at the first call; restore "
                        f"`import {req.package}  # noqa: F401` where its operators are used",
                    )
                continue
            if ops is None:
                defined = set(project.remember("opdefs.definitions", lambda: tree_op_definitions(files)))
                ops = _extension_ops(self.ctx.tree, defined)
            if ops:
                node = ops[0]
                self.report(
                    _import_block(self.ctx.tree) or node,
                    f"`{dotted_name(node)}` (line {node.lineno}) is an operator no module of the tree defines: an extension package "
                    f"registers it when imported. `{os.path.relpath(req.file, root)}` (line {req.line}) says "
                    f"importing `{req.module}` imports `{req.package}`, yet nothing that import loads (this module "
                    f"included) imports it any more: the operator is missing at the first call; restore "
                    f"`import {req.package}  # noqa: F401` among this module's package imports",
                )
