"""NPU509 unresolved-tree-import."""

from __future__ import annotations

import ast
import functools
import os

from npu_lint.core.astutil import last_name, module_package, resolve_relative, transformers_version
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.packaging._shared import _repo_pin
from npu_lint.veomni.imports import ModuleIndex, upstream_module_defines

_OPTIONAL = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})


def _handles_import_error(handlers: list[ast.ExceptHandler]) -> bool:
    for handler in handlers:
        kind = handler.type
        if kind is None:
            return True
        kinds = kind.elts if isinstance(kind, ast.Tuple) else [kind]
        for k in kinds:
            name = last_name(k) or ""
            if name in _OPTIONAL:
                return True
    return False


def _spec_import(call: ast.Call) -> tuple[ast.expr, str, list[tuple[ast.expr, str]]] | None:
    """(node, module, [(node, name)]) of a spec's ``add_import("pkg.mod", names=[...])`` call."""
    module: ast.expr | None = call.args[0] if call.args else None
    names: ast.expr | None = call.args[1] if len(call.args) > 1 else None
    for kw in call.keywords:
        if kw.arg == "module":
            module = kw.value
        elif kw.arg == "names":
            names = kw.value
    if not (isinstance(module, ast.Constant) and isinstance(module.value, str)):
        return None
    out: list[tuple[ast.expr, str]] = []
    if isinstance(names, (ast.List, ast.Tuple)):
        out = [(e, e.value) for e in names.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return module, module.value, out


@functools.lru_cache(maxsize=16)
def _distribution_root(root: str) -> bool:
    """Whether the tree is a whole distribution (a checkout with its build file, or an installed wheel with
    its metadata): only then does a module it lacks mean a broken import, not a sketch or a partial copy."""
    if any(os.path.isfile(os.path.join(root, name)) for name in ("pyproject.toml", "setup.py", "setup.cfg")):
        return True
    try:
        return any(
            n.startswith("veomni") and n.endswith((".dist-info", ".egg-info")) for n in os.listdir(root)
        )
    except OSError:
        return False


def _complete(index: ModuleIndex, module: str) -> bool:
    """Whether the tree can answer for ``module``: its parent package is a regular package of the tree
    (``__init__.py`` all the way down). A copy of part of a tree (directories without ``__init__.py``), or a
    whole sub-package absent (a tree that vendors only some of ``veomni``), cannot say what is missing."""
    parts = module.split(".")
    for i in range(1, len(parts)):
        directory = index.root.joinpath(*parts[:i])
        if not directory.is_dir() or not (directory / "__init__.py").is_file():
            return False
    return len(parts) > 1


class UnresolvedTreeImport(Rule):
    code = "NPU509"
    name = "unresolved-tree-import"
    summary = (
        "An import (a statement, relative or absolute, or a patch spec's `add_import`) names a module of the "
        "tree (or of the pinned transformers release) that does not exist, or a name that module does not define."
    )
    why = (
        "NPU ports move code: kernels into `veomni/ops/...`, helpers between `utils` modules, classes into "
        "generated files. An import left on the old path fails with `ImportError` when the module runs, which "
        "for an NPU-only module, a lazily imported branch or a generated `_npu` file is often first on an "
        "Ascend host. A spec's `add_import` reaches the generated file the same way. The import is resolved "
        "statically against the tree being linted: every import of the tree when it is a whole distribution "
        "(a checkout with its `pyproject.toml`/`setup.py`, or an installed wheel), else (a sketch, a partial "
        "copy) only imports of the file's own model package (relative imports from the file's own package; "
        "re-exports "
        "and star imports followed); imports of other packages, imports inside `try` blocks that handle "
        "`ImportError`, and generated modules a spec will produce are left alone. Imports from `transformers` are "
        "resolved the same way against the release the tree pins, when that release is the one installed (read "
        "statically): a module it lacks, or a name a plain module of it does not bind (transformers 5 moved "
        "`no_init_weights` from `modeling_utils` to `initialization`); its packages export through a lazy import "
        "structure and are not judged by name."
    )
    bad = (
        Example(
            """
            from veomni.utils.device import get_device_type, get_torch_device_name


            def device_name():
                return get_device_type()
            """,
            title="`veomni/utils/device.py` of the tree defines no `get_torch_device_name`",
            path="veomni/models/toy_helpers.py",
        ),
        Example(
            """
            def pick_kernel():
                from ..ops.fused_norm_npu import rms_norm

                return rms_norm
            """,
            title="a relative import of a module the tree does not contain",
            path="veomni/models/toy_helpers.py",
        ),
    )
    good = (
        Example(
            """
            try:
                from veomni.ops.optional_kernels import fused_rope
            except ImportError:
                fused_rope = None
            """,
            path="veomni/models/toy_helpers.py",
        ),
    )
    node_types = (ast.ImportFrom, ast.Import, ast.Call)
    requires = ("import",)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        root = ctx.project.root
        return not ctx.source.kind.test and root is not None and ctx.project.api.index is not None

    def _scope(self) -> str | None:
        """None in a whole distribution (every import of the tree is judged); else the file's model package
        (its directory, less a trailing ``generated``): a sketch or partial copy that holds the package still
        holds the package's own modules, so only imports into it are judged."""
        ctx = self.ctx
        cached = ctx.memo.get("npu509-scope", False)
        if cached is not False:
            return cached  # type: ignore[return-value]
        scope: str | None = None
        if not _distribution_root(str(ctx.project.root)):
            package = module_package(ctx.source.path)
            if package and package[-1] == "generated":
                package = package[:-1]
            scope = ".".join(package) or "\0"
        ctx.memo["npu509-scope"] = scope
        return scope

    def _optional(self) -> bool:
        for parent in self.ctx.parents:
            if isinstance(parent, ast.Try) and _handles_import_error(parent.handlers):
                return True
            if type(parent).__name__ == "TryStar" and _handles_import_error(
                parent.handlers
            ):  # pragma: no cover
                return True
            if isinstance(parent, ast.If):
                test = ast.unparse(parent.test)
                if "TYPE_CHECKING" in test:
                    return True
        return False

    def visit(self, node: ast.AST) -> None:
        ctx = self.ctx
        index = ctx.project.api.index
        assert index is not None
        if isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Attribute) and node.func.attr == "add_import"):
                return
            found = _spec_import(node)
            if found is None:
                return
            module_node, module, names = found
            self._check(module_node, module, [(n, name) for n, name in names])
            return
        if self._optional():
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                self._check(node, alias.name, [])
            return
        assert isinstance(node, ast.ImportFrom)
        module = node.module or ""
        if node.level:
            path = ctx.source.path
            if ctx.source.kind.spec and ctx.function is not None:
                # a patch function's body is copied into the generated module: its relative imports resolve
                # from ``<package>/generated/``
                path = os.path.join(os.path.dirname(path), "generated", os.path.basename(path))
            module = resolve_relative(path, "." * node.level + module)
            if module.startswith("."):
                return  # the file's package is unknown
        self._check(node, module, [(node, a.name) for a in node.names if a.name != "*"])

    def _pinned_upstream(self) -> str | None:
        """The transformers release the tree pins, when it is the one installed (read statically): only then
        does a name that release lacks mean the tree's import fails."""
        cached = self.ctx.memo.get("npu509-pinned", False)
        if cached is not False:
            return cached  # type: ignore[return-value]
        root = str(self.ctx.project.root)

        def compute() -> str | None:
            pin = _repo_pin(root)
            version = transformers_version()
            return pin[0] if pin is not None and version is not None and pin[0] == version else None

        pinned = self.ctx.project.remember(("npu509-pinned-upstream", root), compute)  # read once per project
        self.ctx.memo["npu509-pinned"] = pinned
        return pinned

    def _check_upstream(self, node: ast.AST, module: str, names: list[tuple[ast.AST, str]]) -> None:
        version = self._pinned_upstream()
        if version is None:
            return
        if upstream_module_defines(module, None) is False:
            self.report(
                node,
                f"transformers=={version} (the tree's pin, installed) has no module `{module}`: this import "
                "raises ImportError (moved or removed in that release?)",
            )
            return
        for at, name in names:
            if upstream_module_defines(module, name) is False:
                self.report(
                    at,
                    f"`{module}` of transformers=={version} (the tree's pin, installed) defines no `{name}`: "
                    "this import raises ImportError (moved or removed in that release?)",
                )

    def _check(self, node: ast.AST, module: str, names: list[tuple[ast.AST, str]]) -> None:
        index = self.ctx.project.api.index
        api = self.ctx.project.api
        if module.split(".")[0] == "transformers":
            self._check_upstream(node, module, names)
            return
        if (
            index is None
            or not module
            or not index.is_local(module)
            or module.split(".")[0] in ("tests", "test")
        ):
            return
        scope = self._scope()
        if (
            scope is not None
            and module != scope
            and module.rsplit(".", 1)[0] not in (scope, scope + ".generated")
        ):
            return
        if not _complete(index, module):
            return  # a partial tree (a namespace directory where the package would be): not ours to judge
        if not index.has_module(module):
            if api.import_problem(module, "") is None:
                return  # a generated module one of the package's specs produces
            self.report(
                node,
                f"`{module}` is not a module of this tree (no `{module.replace('.', '/')}.py` or package under "
                f"{os.path.basename(str(index.root)) or 'the root'}): importing it raises ImportError",
            )
            return
        for at, name in names:
            if index.defines(module, name):
                continue
            located = index.module_path(module)
            where = os.path.relpath(str(located[0]), str(index.root)) if located else module
            self.report(
                at,
                f"`{module}` ({where}) defines no `{name}` (and has no submodule of that name): this import "
                "raises ImportError",
            )
