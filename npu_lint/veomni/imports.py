"""Static import resolution in a VeOmni tree: does ``from module import name`` resolve?

A :class:`ModuleIndex` maps a dotted module to its file under the tree root (``a/b.py`` or
``a/b/__init__.py``) and reads the names bound at its top level with ``ast`` (never importing it): ``def``,
``class``, assignments, ``import`` / ``from ... import`` bindings (relative ones resolved), star imports
(honouring the source's ``__all__``), submodules of a package, and, as a last resort, names listed in
``__all__``. Re-exports and star imports are followed a bounded number of
levels. Results are cached on the instance (one index per run; no module-level memo).
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass, field
from pathlib import Path

from npu_lint.core.astutil import absolute_module, parse_snippet, transformers_dir
from npu_lint.core.astutil import resolve_relative as resolve_from_path
from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (faster)
from npu_lint.veomni.signatures import Signature, module_signatures

MAX_REEXPORT_DEPTH = 8


@dataclass
class ModuleInfo:
    """The top-level bindings of one module, as read from its source."""

    path: str
    is_package: bool
    local: set[str] = field(default_factory=set)  # def / class / assignment / plain import
    all_names: tuple[str, ...] | None = None  # the literal ``__all__``, when there is one
    reexports: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # name -> (module, name|None)
    star: list[str] = field(default_factory=list)  # modules star-imported
    functions: dict[str, tuple[str, ...]] = field(default_factory=dict)  # def name -> parameter names
    constants: dict[str, ast.expr] = field(default_factory=dict, repr=False)  # NAME = <literal expr>
    # def name -> {parameter: its string-literal default} (NPU218: a kernel name a caller may omit)
    str_defaults: dict[str, dict[str, str]] = field(default_factory=dict, repr=False)


resolve_relative = absolute_module  # (module, is_package, level, target): core.astutil's one resolver


def _bind_targets(target: ast.expr, out: set[str]) -> None:
    if isinstance(target, ast.Name):
        out.add(target.id)
    elif isinstance(target, (ast.Tuple, ast.List)):
        for elt in target.elts:
            _bind_targets(elt, out)
    elif isinstance(target, ast.Starred):
        _bind_targets(target.value, out)


def _params(node: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[str, ...]:
    a = node.args
    names = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    if a.vararg:
        names.append("*" + a.vararg.arg)
    if a.kwarg:
        names.append("**" + a.kwarg.arg)
    return tuple(names)


def _str_defaults(node: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, str]:
    """Parameter -> default of the parameters whose default is a string literal."""
    a = node.args
    positional = [*a.posonlyargs, *a.args]
    pairs = list(zip(positional[len(positional) - len(a.defaults) :], a.defaults, strict=False))
    pairs += [(p, d) for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=False) if d is not None]
    return {p.arg: d.value for p, d in pairs if isinstance(d, ast.Constant) and isinstance(d.value, str)}


def _never_at_runtime(test: ast.expr) -> bool:
    """An ``if`` test false whenever the module is imported: ``TYPE_CHECKING`` (``typing.`` or not), ``False``,
    ``0``. Names bound only under it are not importable at run time."""
    if isinstance(test, ast.Constant):
        return not test.value
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def module_tree(path: Path) -> ast.Module | None:
    """The tree of a module of the tree, from the run's one store of parsed files (``patchgen.load_file``): the
    file pass reuses it, and a file the pass parsed first is not parsed again. None when unreadable."""
    from npu_lint.veomni.patchgen import load_file

    parsed = load_file(str(path))
    return None if parsed is None else parsed.tree


def read_module_info(module: str, path: Path, is_package: bool, tree: ast.Module | None = None) -> ModuleInfo:
    """Read the top-level bindings of ``module`` (source at ``path``)."""
    info = ModuleInfo(str(path), is_package)
    if tree is None:
        tree = module_tree(path)
        if tree is None:
            return info

    def scan(stmts: list[ast.stmt]) -> None:
        for stmt in stmts:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                info.local.add(stmt.name)
                info.functions[stmt.name] = _params(stmt)
                defaults = _str_defaults(stmt)
                if defaults:
                    info.str_defaults[stmt.name] = defaults
            elif isinstance(stmt, ast.ClassDef):
                info.local.add(stmt.name)
            elif isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    _bind_targets(target, info.local)
                    if isinstance(target, ast.Name):
                        info.constants[target.id] = stmt.value
                        if target.id == "__all__":
                            _add_all(stmt.value)
            elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
                _bind_targets(stmt.target, info.local)
                if (
                    isinstance(stmt.target, ast.Name)
                    and stmt.target.id == "__all__"
                    and stmt.value is not None
                ):
                    _add_all(stmt.value)
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value:
                    info.constants[stmt.target.id] = stmt.value
            elif isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    if alias.asname:
                        info.reexports[alias.asname] = (alias.name, None)
                    else:
                        info.local.add(alias.name.split(".")[0])
            elif isinstance(stmt, ast.ImportFrom):
                source = resolve_relative(module, is_package, stmt.level, stmt.module)
                for alias in stmt.names:
                    if alias.name == "*":
                        if source:
                            info.star.append(source)
                        continue
                    bound = alias.asname or alias.name
                    if source is None:
                        info.local.add(bound)
                    else:
                        info.reexports[bound] = (source, alias.name)
            elif isinstance(stmt, ast.Delete):  # `del name`: no longer importable (a fix must not import it)
                for target in stmt.targets:
                    gone: set[str] = set()
                    _bind_targets(target, gone)
                    for name in gone:
                        info.local.discard(name)
                        info.reexports.pop(name, None)
                        info.functions.pop(name, None)
            elif isinstance(stmt, ast.If) and _never_at_runtime(stmt.test):
                scan(stmt.orelse)  # `if TYPE_CHECKING:` / `if False:`: its body binds nothing when imported
            elif isinstance(stmt, (ast.If, ast.Try, ast.With)) or type(stmt).__name__ == "TryStar":
                scan(getattr(stmt, "body", []))
                scan(getattr(stmt, "orelse", []))
                scan(getattr(stmt, "finalbody", []))
                for handler in getattr(stmt, "handlers", []):
                    scan(handler.body)

    def _add_all(value: ast.expr) -> None:
        if isinstance(value, (ast.List, ast.Tuple)):
            names = [e.value for e in value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            info.all_names = (*(info.all_names or ()), *names)

    scan(tree.body)
    return info


class ModuleIndex:
    """Answers statically whether ``from module import name`` resolves in the tree under ``root``."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self._infos: dict[str, ModuleInfo | None] = {}
        self._top: set[str] | None = None
        self._signatures: dict[str, dict[str, Signature]] = {}
        self._paths: dict[str, tuple[Path, bool] | None] = {}  # module -> ``module_path``'s answer

    def __getstate__(self) -> dict[str, object]:  # sent to worker processes without its caches
        return {
            "root": self.root,
            "_infos": {},
            "_top": None,
            "_defaults": {},
            "_signatures": {},
            "_contract_callees": {},
            "_paths": {},
        }

    def string_defaults(self, module: str, name: str) -> tuple[str, dict[str, str], tuple[str, ...]] | None:
        """(defining module, parameter -> string default, parameters) of the function ``name`` reached from
        ``module`` (re-exports followed); None when it is not a function of this tree with string defaults.
        Memoised per index (strings only)."""
        key = f"{module}:{name}"
        memo: dict[str, tuple[str, dict[str, str], tuple[str, ...]] | None] = self.__dict__.setdefault(
            "_defaults", {}
        )
        if key in memo:
            return memo[key]
        found = self.origin(module, name)
        info = self.info(found) if found else None
        result = None
        if info is not None and found is not None and info.str_defaults.get(name):
            result = (found, info.str_defaults[name], info.functions.get(name, ()))
        memo[key] = result
        return result

    def signatures(self, module: str) -> dict[str, Signature]:
        """The call signatures of ``module``'s top-level functions and classes (read once per run, on demand:
        only modules that a checked call resolves to are parsed for it)."""
        found = self._signatures.get(module)
        if found is None:
            found = {}
            located = self.module_path(module)
            if located is not None and located[0].is_file():
                tree = module_tree(located[0])
                if tree is not None:
                    found = module_signatures(tree.body)
            self._signatures[module] = found
        return found

    # -- modules ----------------------------------------------------------------------------------------
    def module_path(self, module: str) -> tuple[Path, bool] | None:
        """(file, is_package) of ``module`` under the root, or None; remembered, like ``info`` (one index per run)."""
        if module in self._paths:
            return self._paths[module]
        found = self._module_path(module)
        self._paths[module] = found
        return found

    def _module_path(self, module: str) -> tuple[Path, bool] | None:
        if not module or any(not p.isidentifier() for p in module.split(".")):
            return None
        base = self.root.joinpath(*module.split("."))
        init = base / "__init__.py"
        if init.is_file():
            return init, True
        py = base.with_suffix(".py")
        if py.is_file():
            return py, False
        if base.is_dir():  # a namespace package: only submodules are importable from it
            return base, True
        return None

    def has_module(self, module: str) -> bool:
        return self.module_path(module) is not None

    def is_local(self, module: str) -> bool:
        """True when ``module``'s top-level package lives under the root (else it is external)."""
        if self._top is None:
            try:
                self._top = {
                    p.name if p.is_dir() else p.stem
                    for p in self.root.iterdir()
                    if (p.is_dir() and not p.name.startswith(".")) or p.suffix == ".py"
                }
            except OSError:
                self._top = set()
        return module.split(".")[0] in self._top

    def info(self, module: str) -> ModuleInfo | None:
        if module in self._infos:
            return self._infos[module]
        found = self.module_path(module)
        result: ModuleInfo | None = None
        if found is not None:
            path, is_package = found
            if path.is_dir():
                result = ModuleInfo(str(path), True)
            else:
                result = read_module_info(module, path, is_package)
        self._infos[module] = result
        return result

    # -- names ------------------------------------------------------------------------------------------
    def defines(self, module: str, name: str, _depth: int = 0) -> bool:
        """Whether ``from module import name`` resolves in this tree (statically)."""
        info = self.info(module)
        if info is None:
            return False
        if name in info.local:
            return True
        if info.is_package and self.has_module(f"{module}.{name}"):
            return True
        if _depth >= MAX_REEXPORT_DEPTH:
            return False  # too deep to follow: not shown to resolve (fixes must not rely on it)
        if name in info.reexports:
            source, source_name = info.reexports[name]
            if source_name is None:  # import a.b as name
                return self.has_module(source) or not self.is_local(source)
            if not self.is_local(source):
                return True  # bound from an external package: its import is not ours to check
            return self.defines(source, source_name, _depth + 1) or self.has_module(f"{source}.{source_name}")
        for source in info.star:
            if self.is_local(source):
                if self._star_exports(source, name, _depth + 1):
                    return True
            elif not name.startswith("_"):
                return True  # forwarded from an external package (a shim): not ours to check, as above
        # listed in __all__ without a binding we can see (e.g. served by a module __getattr__)
        return name in (info.all_names or ())

    def _star_exports(self, module: str, name: str, depth: int) -> bool:
        """Whether ``from module import *`` binds ``name``."""
        info = self.info(module)
        if info is None:
            return False
        if info.all_names is not None:
            if name not in info.all_names:
                return False
        elif name.startswith("_"):
            return False
        return self.defines(module, name, depth)

    def can_import(self, module: str, names: list[str] | tuple[str, ...]) -> bool:
        return all(self.defines(module, n) for n in names)

    def origin(self, module: str, name: str, _depth: int = 0) -> str | None:
        """The module whose top level defines ``name`` as reached from ``module`` (following re-exports)."""
        info = self.info(module)
        if info is None:
            return None
        if name in info.local:
            return module
        if name in info.reexports and _depth < MAX_REEXPORT_DEPTH:
            source, source_name = info.reexports[name]
            if source_name is not None and self.is_local(source):
                return self.origin(source, source_name, _depth + 1)
        for source in info.star:
            if (
                self.is_local(source)
                and _depth < MAX_REEXPORT_DEPTH
                and self._star_exports(source, name, _depth + 1)
            ):
                found = self.origin(source, name, _depth + 1)
                if found:
                    return found
        return None


# -- the names a file imports from the tree (the fix invariant) -------------------------------------------

_POST_IMPORT_METHODS = ("add_post_import_block",)


def veomni_imports(tree: ast.Module, path: str) -> set[tuple[str, str]]:
    """Every ``(module, name)`` a file imports from the ``veomni`` package: ``from veomni... import X``
    statements anywhere (relative ones resolved from ``path``), a patch spec's ``add_import("veomni...",
    names=[...])`` calls (they reach the generated file), and the imports inside its post-import blocks (code
    strings pasted into the generated file). ``import veomni.x`` gives ``("veomni.x", "")``."""
    out: set[tuple[str, str]] = set()
    for node in _walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                module = resolve_from_path(path, "." * node.level + module)
            if module == "veomni" or module.startswith("veomni."):
                out.update((module, a.name) for a in node.names if a.name != "*")
        elif isinstance(node, ast.Import):
            out.update((a.name, "") for a in node.names if a.name.startswith("veomni."))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "add_import":
                _spec_import(node, out)
            elif node.func.attr in _POST_IMPORT_METHODS and node.args:
                code = node.args[0]
                if isinstance(code, ast.Constant) and isinstance(code.value, str):
                    block = parse_snippet(code.value)  # shared with the rules' reads of the block
                    if block is None:
                        continue
                    out |= veomni_imports(block, path)
    return out


def _spec_import(call: ast.Call, out: set[tuple[str, str]]) -> None:
    module = call.args[0] if call.args else None
    names: ast.expr | None = call.args[1] if len(call.args) > 1 else None
    for kw in call.keywords:
        if kw.arg == "module":
            module = kw.value
        elif kw.arg == "names":
            names = kw.value
    if not (isinstance(module, ast.Constant) and isinstance(module.value, str)):
        return
    if not module.value.startswith("veomni"):
        return
    if isinstance(names, (ast.List, ast.Tuple)):
        for elt in names.elts:
            if isinstance(elt, ast.Constant) and isinstance(elt.value, str):
                out.add((module.value, elt.value))
    elif names is None:
        out.add((module.value, ""))


@functools.lru_cache(maxsize=2)
def _upstream_index(base: str) -> ModuleIndex:
    return ModuleIndex(Path(base).parent)


def upstream_index() -> ModuleIndex | None:
    """A ``ModuleIndex`` over the transformers source the upstream readers use (``transformers_dir``): whether
    ``from transformers.<module> import name`` resolves in that release. One per source directory per process
    (an installed release does not change under a run). Its packages' ``__init__`` export through a lazy
    import structure, so only plain modules answer for names (`upstream_module_defines`)."""
    base = transformers_dir()
    return _upstream_index(str(base)) if base is not None else None


def upstream_module_defines(module: str, name: str | None) -> bool | None:
    """Whether the transformers release read statically has ``module`` (and, for a plain module, whose names
    are its own bindings, defines ``name``); None when it cannot say (no source, a package whose names come
    from its lazy import structure, a module with a module-level ``__getattr__``, a missing module whose
    package is missing too)."""
    index = upstream_index()
    if index is None or module.split(".")[0] != "transformers":
        return None
    found = index.module_path(module)
    if found is None:
        parent = module.rsplit(".", 1)[0]
        parent_found = index.module_path(parent) if parent != module else None
        return False if parent_found is not None and parent_found[1] else None
    path, is_package = found
    if name is None:
        return True
    if is_package:
        return None
    info = index.info(module)
    if info is None or "__getattr__" in info.local:
        return None
    return index.defines(module, name)
