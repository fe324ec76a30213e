"""NPU235 module-global-set-locally."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import nodes_of, own_nodes, walk
from npu_lint.rules.base import Context, Example, Rule

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _module_names(tree: ast.Module) -> set[str]:
    """Names a module binds by assignment at its top level (also under a top-level ``if`` / ``try``)."""
    out: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for stmt in body:
            targets: list[ast.expr] = []
            if isinstance(stmt, ast.Assign):
                targets = stmt.targets
            elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                targets = [stmt.target]
            for target in targets:
                out.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
            if isinstance(stmt, (ast.If, ast.Try)):
                visit(stmt.body)
                visit(stmt.orelse)
                for handler in getattr(stmt, "handlers", []):
                    visit(handler.body)

    visit(tree.body)
    return out


def _declared(func: ast.AST) -> set[str]:
    return {
        name
        for node in own_nodes(func)
        if isinstance(node, (ast.Global, ast.Nonlocal))
        for name in node.names
    }


def _readers(tree: ast.Module, name: str) -> list[ast.AST]:
    """Functions that read module-level ``name`` (they load it and bind no local of that name)."""
    out: list[ast.AST] = []
    for node in walk(tree):
        if not isinstance(node, _FUNCS):
            continue
        own = own_nodes(node)
        loads = any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) for n in own)
        stores = any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store) for n in own)
        args = {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
        if loads and (not stores or name in _declared(node)) and name not in args:
            out.append(node)
    return out


class ModuleGlobalSetLocally(Rule):
    code = "NPU235"
    name = "module-global-set-locally"
    summary = (
        "A function or a method assigns a module-level variable (a singleton, an installed config, a registry) without "
        "`global`, never reads what it assigned, and another function reads the module variable: the "
        "assignment binds a local and the module variable keeps its old value."
    )
    why = (
        "VeOmni installs process-wide state through setters: `set_ops_config(config)` stores the ops "
        "implementation config that every handle, device patch and registry lookup reads back with "
        "`get_ops_config()`; kernel tables and parallel states follow the same shape. In Python an assignment "
        "inside a function binds a local unless the function declares the name `global`, so a setter without "
        "it does nothing: the getter keeps returning `None` (or the default) and every NPU kernel the config "
        "selected falls back to its default, silently. The rule reports a function, or a method of a top-level class (a bare name "
        "assigned in a method is a local too, not an attribute), that assigns a name the module binds at top level and some other function reads, when the function neither declares it "
        "`global`/`nonlocal` nor reads the local it assigned (also when the assignment is marked `# noqa: F841`: silencing "
        "the unused-local warning does not make the assignment reach the module)."
    )
    bad = (
        Example(
            """
            _ops_config = None


            def set_ops_config(config):
                _ops_config = config


            def get_ops_config():
                return _ops_config
            """,
            path="veomni/ops/config/singleton.py",
            title="the setter binds a local",
        ),
        Example(
            """
            _ATTN_IMPL = "eager"


            class Installer:
                def install(self, impl):
                    _ATTN_IMPL = impl


            def attn_impl():
                return _ATTN_IMPL
            """,
            path="veomni/utils/toy_installer.py",
            title="a method binds a local, not the module variable",
        ),
        Example(
            """
            _KERNELS = {}


            def install_npu_kernels(table):
                _KERNELS = dict(table)
                print("installed", len(table))


            def kernel_for(name):
                return _KERNELS.get(name)
            """,
            path="veomni/ops/kernels/table.py",
            title="a table replaced locally",
        ),
    )
    good = (
        Example(
            """
            _ops_config = None


            def set_ops_config(config):
                global _ops_config
                _ops_config = config


            def get_ops_config():
                return _ops_config
            """,
            path="veomni/ops/config/singleton.py",
        ),
        Example(
            """
            _DEFAULT = "eager"


            def pick(name):
                _DEFAULT = name or "eager"
                return _DEFAULT


            def default():
                return _DEFAULT
            """,
            title="a local that shadows the module name and is read",
        ),
    )
    fix_safety = "No fix: add `global <name>` when the function means to set the module variable."
    node_types = _FUNCS

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self._module: set[str] | None = None  # the names the module binds at top level, read once per file
        self._readers: dict[str, list[ast.AST]] = {}  # per module name, the functions that read it

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, _FUNCS)
        parents = self.ctx.parents
        if not (
            (len(parents) == 1 and parents[0] is self.ctx.tree)
            or (len(parents) == 2 and parents[0] is self.ctx.tree and isinstance(parents[1], ast.ClassDef))
        ):
            return  # nested functions: a name they bind may be meant for the enclosing function (a closure)
        if self._module is None:
            self._module = _module_names(self.ctx.tree)
        module = self._module
        if not module:
            return
        # only a name the module binds can be reported: a function storing none of them anywhere (its own scope
        # is part of its subtree) is done without listing its own nodes
        if not any(
            type(n.ctx) is ast.Store and n.id in module
            for n in nodes_of(node, ast.Name)  # type: ignore[attr-defined]
        ):
            return
        own = own_nodes(node)
        stored: dict[str, ast.Name] = {}
        loaded: set[str] = set()
        # `name: T` without a value binds nothing (a declaration, not an install)
        declared_only = {id(s.target) for s in own if isinstance(s, ast.AnnAssign) and s.value is None}
        for sub in own:
            if isinstance(sub, ast.Name) and id(sub) not in declared_only:
                if isinstance(sub.ctx, ast.Store):
                    stored.setdefault(sub.id, sub)
                else:
                    loaded.add(sub.id)
        if not stored.keys() & module:
            return
        # names read by a nested function (a closure) count as read
        for sub in nodes_of(node, ast.Name):
            if isinstance(sub.ctx, ast.Load):  # type: ignore[attr-defined]
                loaded.add(sub.id)  # type: ignore[attr-defined]
        candidates = set(stored) - loaded - _declared(node)
        if not candidates:
            return
        for name in sorted(candidates & module):
            if any(isinstance(s, (ast.For, ast.comprehension, ast.With)) for s in own if _binds(s, name)):
                continue
            found = self._readers.get(name)
            if found is None:
                found = self._readers[name] = _readers(self.ctx.tree, name)
            readers = [r for r in found if r is not node]
            if not readers or self._calls_setter(own, name):
                continue
            reader = readers[0].name  # type: ignore[attr-defined]
            self.report(
                stored[name],
                f"`{node.name}` assigns `{name}` without `global {name}` and never reads it: the assignment binds a "
                f"local, so the module-level `{name}` that `{reader}` reads keeps its old value",
            )

    def _calls_setter(self, own: list[ast.AST], name: str) -> bool:
        """The function also calls a module-level function of the file that declares `global name` (the setter):
        the module variable is set through it, the local is a dead store."""
        setters = {f.name for f in self.ctx.tree.body if isinstance(f, _FUNCS) and name in _declared(f)}
        return any(
            isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id in setters for c in own
        )


def _binds(stmt: ast.AST, name: str) -> bool:
    """Whether a loop / with statement binds ``name`` as its target (an iteration variable, not an install)."""
    target = getattr(stmt, "target", None)
    if isinstance(stmt, ast.With):
        return any(
            isinstance(n, ast.Name) and n.id == name
            for item in stmt.items
            if item.optional_vars is not None
            for n in ast.walk(item.optional_vars)
        )
    return target is not None and any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(target))
