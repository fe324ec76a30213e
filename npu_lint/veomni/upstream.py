"""Read the installed ``transformers`` source with astroid, never importing it.

The dispatch-migration codemod needs a few facts about the upstream modeling module a patch spec targets
(``PatchConfig(source_module=...)``): the source text of a class's ``__init__`` (to copy it into an
``override_method("Cls.__init__")``), the ``__init__`` a class inherits when it has none, which methods call a
module-level function (``apply_rotary_pos_emb``), and where a name used in a copied signature comes from.

Modules are located on disk by the one resolver, ``core.astutil.transformers_dir`` (``NPU_LINT_TRANSFORMERS_SRC``,
else ``importlib.util.find_spec("transformers")``, which does not execute the package) and built with astroid
without its inference-driven post-processing, so a build stays bounded (no cascade into other modules); names are resolved by following import statements by hand, one module at a time.
"""

from __future__ import annotations

import ast
import functools
import os
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from npu_lint.core.astutil import (  # last_name: re-exported for the rules that import it from here
    import_bindings,
    last_name,
    scoped_memo,
    transformers_dir,
    use_transformers_root,
    walk,
)
from npu_lint.core.memo import Bounded
from npu_lint.core.safeio import read_regular, read_text

__all__ = [
    "MethodSource",
    "InheritedInit",
    "transformers_root",
    "use_transformers_root",
    "module_path",
    "build_module",
    "method_source",
    "class_init",
    "callers_of",
    "resolve_name_import",
    "self_attributes",
    "MroEntry",
    "upstream_mro",
    "super_inits",
    "decorator_target",
]


def transformers_root() -> str | None:
    """Directory of the ``transformers`` package to read, as a string: :func:`npu_lint.core.astutil.transformers_dir`
    (the one resolver: ``use_transformers_root``, ``NPU_LINT_TRANSFORMERS_SRC``, the installed package)."""
    found = transformers_dir()
    return str(found) if found is not None else None


def module_path(modname: str) -> str | None:
    """File of a ``transformers.*`` module, or None."""
    root = transformers_root()
    if root is None or not (modname == "transformers" or modname.startswith("transformers.")):
        return None
    rel = modname.split(".")[1:]
    base = os.path.join(root, *rel)
    for candidate in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(candidate):
            return candidate
    return None


@functools.lru_cache(maxsize=64)
def _build(path: str, modname: str, mtime: float) -> tuple[Any, list[str]] | None:
    import astroid

    try:
        text = read_text(path)
    except (OSError, UnicodeDecodeError):
        return None
    try:
        try:
            # The plain tree, rebuilt from the stdlib parse: no astroid bootstrapping and none of its
            # post-build inference (which would build dozens of other modules).
            from astroid.rebuilder import TreeRebuilder

            tree = ast.parse(text, path, type_comments=True)
            module = TreeRebuilder(astroid.MANAGER, data=text).visit_module(
                tree, modname, path, path.endswith("__init__.py")
            )
        except (ImportError, AttributeError, TypeError):  # pragma: no cover - astroid changed its internals
            module = astroid.MANAGER.ast_from_file(path, modname, source=True)
    except (SyntaxError, ValueError, RecursionError, astroid.AstroidError):
        return None  # a file of site-packages that does not parse or build: no model of it (documented)
    return module, text.splitlines(keepends=True)


def build_module(modname: str) -> tuple[Any, list[str]] | None:
    """The astroid Module and source lines of ``modname`` (cached), or None when not found."""
    path = module_path(modname)
    if path is None:
        return None
    return _build(path, modname, os.path.getmtime(path))


def _class(modname: str, cls: str) -> Any | None:
    built = build_module(modname)
    if built is None:
        return None
    module, _ = built
    for node in module.body:
        if type(node).__name__ == "ClassDef" and node.name == cls:
            return node
    return None


def _method(cls_node: Any, name: str) -> Any | None:
    for node in cls_node.body:
        if type(node).__name__ in ("FunctionDef", "AsyncFunctionDef") and node.name == name:
            return node
    return None


@dataclass(frozen=True)
class MethodSource:
    """The dedented text of an upstream method (``def`` line to its end, without decorators)."""

    module: str
    cls: str
    name: str
    text: str


def method_source(modname: str, cls: str, name: str) -> MethodSource | None:
    cls_node = _class(modname, cls)
    if cls_node is None:
        return None
    fn = _method(cls_node, name)
    if fn is None:
        return None
    _, lines = build_module(modname)  # type: ignore[misc]
    text = textwrap.dedent("".join(lines[fn.lineno - 1 : fn.end_lineno]))
    return MethodSource(modname, cls, name, text)


@dataclass(frozen=True)
class InheritedInit:
    """A class without its own ``__init__``: the parameters of the one it inherits (``self`` excluded),
    as ``(name, default source or None, kind)`` with kind in positional / vararg / kwonly / kwarg."""

    module: str
    owner: str
    params: tuple[tuple[str, str | None, str], ...]


def _absolute(modname: str, imported: str, level: int, is_package: bool = False) -> str:
    if not level:
        return imported
    parts = modname.split(".")
    base = parts if is_package else parts[:-1]
    if level > 1:
        base = base[: -(level - 1)]
    return ".".join([*base, imported] if imported else base)


def class_init(modname: str, cls: str) -> MethodSource | InheritedInit | None:
    """The class's own ``__init__`` (its source) or, when it has none, the parameters of the one it inherits:
    the first ``__init__`` in its MRO (:func:`upstream_mro`, the one class resolver)."""
    cls_node = _class(modname, cls)
    if cls_node is None:
        return None
    own = method_source(modname, cls, "__init__")
    if own is not None:
        return own
    for entry in upstream_mro(modname, cls)[1:]:
        if entry.node is None or entry.module is None or _own_method(entry.node, "__init__") is None:
            continue
        base_node = _class(entry.module, entry.name)
        init = _method(base_node, "__init__") if base_node is not None else None
        if init is not None:
            return InheritedInit(entry.module, entry.name, _params(init))
    return None


def _params(fn: Any) -> tuple[tuple[str, str | None, str], ...]:
    args = fn.args
    out: list[tuple[str, str | None, str]] = []
    positional = [*(args.posonlyargs or []), *(args.args or [])]
    defaults = list(args.defaults or [])
    first_default = len(positional) - len(defaults)
    for i, arg in enumerate(positional):
        if i == 0 and arg.name in ("self", "cls"):
            continue
        default = defaults[i - first_default].as_string() if i >= first_default else None
        out.append((arg.name, default, "positional"))
    if args.vararg:
        out.append((args.vararg, None, "vararg"))
    for arg, default in zip(args.kwonlyargs or [], args.kw_defaults or [], strict=False):
        out.append((arg.name, default.as_string() if default is not None else None, "kwonly"))
    if args.kwarg:
        out.append((args.kwarg, None, "kwarg"))
    return tuple(out)


def callers_of(modname: str, function: str) -> tuple[list[tuple[str, str]], list[str]] | None:
    """Which methods (``(Class, method)``) and which module-level functions of ``modname`` call
    ``function(...)`` by its bare name. None when the module cannot be read."""
    built = build_module(modname)
    if built is None:
        return None
    module, _ = built
    methods: list[tuple[str, str]] = []
    functions: list[str] = []

    def calls(node: Any) -> bool:
        for call in node.nodes_of_class(_call_type()):
            func = call.func
            if type(func).__name__ == "Name" and func.name == function:
                return True
        return False

    for node in module.body:
        kind = type(node).__name__
        if kind == "ClassDef":
            for item in node.body:
                if type(item).__name__ in ("FunctionDef", "AsyncFunctionDef") and calls(item):
                    methods.append((node.name, item.name))
        elif kind in ("FunctionDef", "AsyncFunctionDef") and node.name != function and calls(node):
            functions.append(node.name)
    return methods, functions


def _call_type() -> Any:
    from astroid import nodes

    return nodes.Call


def resolve_name_import(modname: str, name: str) -> str | None:
    """An import statement that binds ``name`` as the upstream module ``modname`` binds it."""
    built = build_module(modname)
    if built is None:
        return None
    module, _ = built
    for node in module.body:
        kind = type(node).__name__
        if kind in ("ClassDef", "FunctionDef", "AsyncFunctionDef") and node.name == name:
            return f"from {modname} import {name}"
        if kind == "ImportFrom":
            for imported, asname in node.names:
                if (asname or imported) == name and imported != "*":
                    target = _absolute(modname, node.modname or "", node.level or 0)
                    alias = f" as {asname}" if asname and asname != imported else ""
                    return f"from {target} import {imported}{alias}"
        if kind == "Import":
            for imported, asname in node.names:
                if (asname or imported.split(".")[0]) == name:
                    return f"import {imported} as {asname}" if asname else f"import {imported}"
    return None


def self_attributes(modname: str, cls: str) -> set[str] | None:
    """Attributes assigned on ``self`` in the class's own ``__init__`` (None when it has none)."""
    cls_node = _class(modname, cls)
    if cls_node is None:
        return None
    init = _method(cls_node, "__init__")
    if init is None:
        return None
    from astroid import nodes

    return {n.attrname for n in init.nodes_of_class(nodes.AssignAttr) if n.expr.as_string() == "self"}


def param_init(func: ast.AST, attr: str) -> bool | None:
    """True: `self.<attr> = nn.Parameter(torch.zeros(...))`; False: another initialiser; None: not set."""
    for node in walk(func):
        if not isinstance(node, ast.Assign):
            continue
        if not any(
            isinstance(t, ast.Attribute)
            and isinstance(t.value, ast.Name)
            and t.value.id == "self"
            and t.attr == attr
            for t in node.targets
        ):
            continue
        value = node.value
        if isinstance(value, ast.Call) and last_name(value.func) == "Parameter" and value.args:
            inner = value.args[0]
            if isinstance(inner, ast.Call) and last_name(inner.func) in ("zeros", "zeros_like", "new_zeros"):
                return True
        return False
    return None


def upstream_path(module: str) -> Path | None:
    """File of a `transformers.*` module, by path arithmetic from the installed package (remembered per source
    directory and module: the rules ask thousands of times per run, each answer cost one or two stats)."""
    if not module.startswith("transformers."):
        return None
    base = transformers_dir()
    if base is None:
        return None
    key = (str(base), module)
    hit = _PATHS.get(key)
    if hit is None:
        hit = _PATHS[key] = (_find_upstream_path(base, module.split(".")),)
    return hit[0]


def _find_upstream_path(base: Path, parts: list[str]) -> Path | None:
    path = base.joinpath(*parts[1:]).with_suffix(".py")
    if path.is_file():
        return path
    init = base.joinpath(*parts[1:], "__init__.py")
    return init if init.is_file() else None


_PATHS: Bounded[tuple[str, str], tuple[Path | None]] = Bounded(1024)


def _upstream_module(module: str) -> tuple[dict[str, ast.ClassDef], dict[str, str]] | None:
    path = upstream_path(module)
    if path is None:
        return None
    return _parse_upstream(module, path)


@functools.lru_cache(maxsize=64)
def _parse_upstream(module: str, path: Path) -> tuple[dict[str, ast.ClassDef], dict[str, str]] | None:
    from npu_lint.veomni.patchgen import load_file  # the run's one tree of the file (NPU418 reads it too)

    parsed = load_file(str(path))
    tree = parsed.tree if parsed is not None else None
    if tree is None:
        return None
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    imports: dict[str, str] = {}
    package = module.rsplit(".", 1)[0]
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            imports.update(import_bindings(node, source))
    return classes, imports


def upstream_zero_init(module: str, cls: str, attr: str = "weight", depth: int = 0) -> bool | None:
    """Whether upstream ``module.cls`` initialises ``self.<attr>`` to zeros (None: unknown)."""
    return _zero_init(transformers_root(), module, cls, attr, depth)


@functools.lru_cache(maxsize=256)
def _zero_init(root: str | None, module: str, cls: str, attr: str, depth: int) -> bool | None:
    found = _upstream_module(module)
    if found is None or depth > 4:
        return None
    classes, imports = found
    node = classes.get(cls)
    if node is None:
        target = imports.get(cls)
        if target and target.startswith("transformers."):
            mod, _, name = target.rpartition(".")
            return upstream_zero_init(mod, name, attr, depth + 1)
        return None
    init = next((s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None)
    if init is not None:
        result = param_init(init, attr)
        if result is not None:
            return result
    for base in node.bases:
        name = last_name(base)
        if name and name != "Module":
            if name in classes:
                result = upstream_zero_init(module, name, attr, depth + 1)
            elif name in imports and imports[name].startswith("transformers."):
                mod, _, real = imports[name].rpartition(".")
                result = upstream_zero_init(mod, real, attr, depth + 1)
            else:
                result = None
            if result is not None:
                return result
    return None


def upstream_class(module: str, cls: str, depth: int = 0) -> tuple[str, ast.ClassDef] | None:
    """The stdlib-ast ClassDef of upstream ``module.cls`` and the module defining it (imports followed)."""
    found = _upstream_module(module)
    if found is None or depth > 4:
        return None
    classes, imports = found
    node = classes.get(cls)
    if node is not None:
        return module, node
    target = imports.get(cls)
    if target and target.startswith("transformers."):
        mod, _, name = target.rpartition(".")
        return upstream_class(mod, name, depth + 1)
    return None


@dataclass(frozen=True)
class MroEntry:
    """One class of an upstream class's method resolution order: where it is defined and its ClassDef (None
    for a base the reader cannot follow, such as ``nn.Module`` or ``object``)."""

    module: str | None
    name: str
    node: ast.ClassDef | None


def _bases(module: str, node: ast.ClassDef) -> list[MroEntry]:
    out = []
    for base in node.bases:
        name = last_name(base)
        if not name:
            continue
        found = upstream_class(module, name) if isinstance(base, ast.Name) else None
        out.append(MroEntry(found[0], found[1].name, found[1]) if found else MroEntry(None, name, None))
    return out


def _c3(seqs: list[list[MroEntry]]) -> list[MroEntry] | None:
    """C3 merge of linearisations (entries compared by module and name); None when inconsistent."""
    key = lambda e: (e.module, e.name)  # noqa: E731
    seqs = [list(s) for s in seqs if s]
    out: list[MroEntry] = []
    while seqs:
        for seq in seqs:
            head = seq[0]
            if not any(key(head) in {key(e) for e in other[1:]} for other in seqs):
                break
        else:
            return None
        out.append(head)
        seqs = [[e for e in s if key(e) != key(head)] for s in seqs]
        seqs = [s for s in seqs if s]
    return out


def upstream_mro(module: str, cls: str) -> list[MroEntry]:
    """The method resolution order of upstream ``module.cls`` as Python computes it (C3 over the bases the
    reader can follow; a base it cannot follow is a leaf), ``cls`` first; empty when the class is not found.
    The one answer to "which class's method runs", for inherited methods and ``super()`` chains."""
    found = upstream_class(module, cls)
    if found is None:
        return []
    return list(_mro(found[0], found[1].name, transformers_root(), 0))


@functools.lru_cache(maxsize=256)
def _mro(module: str, cls: str, root: str | None, depth: int) -> tuple[MroEntry, ...]:
    found = upstream_class(module, cls)
    if found is None:
        return ()
    mod, node = found
    head = MroEntry(mod, node.name, node)
    bases = _bases(mod, node)
    if depth > 12:
        return (head, *bases)
    linear = [list(_mro(b.module, b.name, root, depth + 1)) if b.node is not None else [b] for b in bases]
    merged = _c3([*linear, list(bases)])
    if merged is None:  # an order Python would reject: depth-first, first occurrence (still an answer)
        merged, seen = [], set()
        for seq in linear:
            for e in seq:
                if (e.module, e.name) not in seen:
                    seen.add((e.module, e.name))
                    merged.append(e)
    return (head, *merged)


def _own_method(node: ast.ClassDef | None, name: str) -> ast.FunctionDef | None:
    if node is None:
        return None
    return next((s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == name), None)


def upstream_class_method(module: str, cls: str, name: str) -> ast.FunctionDef | None:
    """The method ``name`` upstream ``module.cls`` defines or inherits (first in its MRO; stdlib ast)."""
    for entry in upstream_mro(module, cls):
        found = _own_method(entry.node, name)
        if found is not None:
            return found
    return None


def _super_starts(func: ast.FunctionDef, names: list[str], owner: int) -> list[int]:
    """MRO indexes where the ``__init__`` lookups ``func`` makes start: ``super().__init__`` and
    ``super(X, self).__init__`` (after ``owner`` / after X), ``Base.__init__(self, ...)`` (at Base)."""
    starts = []
    for node in walk(func):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "__init__"
        ):
            continue
        target = node.func.value
        if isinstance(target, ast.Call) and isinstance(target.func, ast.Name) and target.func.id == "super":
            if not target.args:
                starts.append(owner + 1)
            elif isinstance(target.args[0], ast.Name) and target.args[0].id in names:
                starts.append(names.index(target.args[0].id) + 1)
        elif isinstance(target, ast.Name) and target.id in names[owner + 1 :]:
            starts.append(names.index(target.id, owner + 1))
    return starts


def super_inits(
    module: str, cls: str, func: ast.FunctionDef, owner: str | None = None
) -> list[ast.FunctionDef]:
    """The upstream ``__init__`` methods that run when ``func`` (an ``__init__`` of ``owner``, default ``cls``,
    as an instance of ``module.cls``) calls ``super().__init__`` / ``super(X, self).__init__`` /
    ``Base.__init__(self)``, transitively, in the MRO of ``module.cls``. A chain stops at a base the reader
    cannot follow (``nn.Module``)."""
    mro = upstream_mro(module, cls)
    names = [e.name for e in mro]
    if not mro:
        return []
    at = names.index(owner) if owner in names else 0
    out: list[ast.FunctionDef] = []
    seen: set[int] = set()
    todo = [(func, at)]
    while todo:
        fn, index = todo.pop()
        for start in _super_starts(fn, names, index):
            for j in range(start, len(mro)):
                if mro[j].node is None:
                    break
                init = _own_method(mro[j].node, "__init__")
                if init is None:
                    continue
                if j not in seen:
                    seen.add(j)
                    out.append(init)
                    todo.append((init, j))
                break
    return out


def upstream_class_names(module: str) -> list[str]:
    """The classes an upstream module defines (empty when it cannot be read)."""
    found = _upstream_module(module)
    return list(found[0]) if found is not None else []


# -- the methods a file replaces, paired with the upstream ones ------------------------------------------


@dataclass(frozen=True)
class PatchedMethod:
    """A method of an upstream class as a spec (decorated replacement) or generated file (class body) has it."""

    module: str  # the upstream transformers module
    cls: str
    name: str
    func: ast.FunctionDef  # in the linted file
    upstream: ast.FunctionDef  # the upstream method it replaces (an empty stand-in when upstream has none)


def spec_source_module(path: str, text: str, tree: ast.Module | None = None) -> str | None:
    """The ``source_module`` of a spec that builds on another one (``deepcopy(gpu_config)``, or an imported
    config mutated in place): followed through its base specs on disk."""
    from npu_lint.veomni.patchgen import base_spec, parse_spec

    try:
        spec = parse_spec(path, text, tree)
    except Exception:  # noqa: BLE001 - a spec we cannot model has no known source
        return None
    for _ in range(4):
        if spec is None:
            return None
        if spec.source_module:
            return spec.source_module
        spec = base_spec(spec)
    return None


def file_source_module(tree: ast.Module, text: str, path: str | None = None) -> str | None:
    """The upstream module a spec (``PatchConfig(source_module=...)``, or its base spec's) or generated file
    (banner) copies."""
    for stmt in tree.body:
        value = getattr(stmt, "value", None)
        if isinstance(value, ast.Call) and last_name(value.func) == "PatchConfig":
            for kw in value.keywords:
                if kw.arg == "source_module" and isinstance(kw.value, ast.Constant):
                    return str(kw.value.value)
    for line in text[:4096].splitlines():
        stripped = line.lstrip("# ").strip()
        if stripped.startswith("Source:"):
            return stripped.split(":", 1)[1].strip() or None
    if path is not None and path.endswith("_patch_gen_config.py"):
        return spec_source_module(path, text, tree)
    return None


def decorator_target(func: ast.FunctionDef) -> tuple[str, str] | None:
    for deco in func.decorator_list:
        if not (isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute)):
            continue
        if deco.func.attr not in ("override_method", "modify_init") or not deco.args:
            continue
        target = deco.args[0]
        if not (isinstance(target, ast.Constant) and isinstance(target.value, str)):
            continue
        if deco.func.attr == "modify_init":
            return target.value, "__init__"
        if "." in target.value:
            cls, _, method = target.value.rpartition(".")
            return cls, method
    return None


_decorator_target = decorator_target  # the name other modules import

_PATCH_DECORATORS = frozenset({"override_method", "modify_init", "replace_function", "replace_class"})


def patch_description(func: ast.FunctionDef) -> str | None:
    """The ``description=`` a spec gives the patch its decorator declares (``@config.override_method("C.forward",
    description="... with official eager FP32 fallback")``): what the author says the replacement does."""
    for deco in func.decorator_list:
        if (
            isinstance(deco, ast.Call)
            and isinstance(deco.func, ast.Attribute)
            and deco.func.attr in _PATCH_DECORATORS
        ):
            for kw in deco.keywords:
                if (
                    kw.arg == "description"
                    and isinstance(kw.value, ast.Constant)
                    and isinstance(kw.value.value, str)
                ):
                    return kw.value.value
    return None


def replaced_function(func: ast.FunctionDef) -> str | None:
    """The upstream module-level function a spec's ``@config.replace_function("name")`` replaces."""
    for deco in func.decorator_list:
        if (
            isinstance(deco, ast.Call)
            and isinstance(deco.func, ast.Attribute)
            and deco.func.attr == "replace_function"
        ):
            if deco.args and isinstance(deco.args[0], ast.Constant) and isinstance(deco.args[0].value, str):
                return deco.args[0].value
    return None


def upstream_function(module: str, name: str) -> ast.FunctionDef | None:
    """The module-level function ``name`` of upstream ``module`` (stdlib ast), or None."""
    from npu_lint.veomni.patchgen import load_file

    path = upstream_path(module)
    parsed = load_file(str(path)) if path is not None else None
    if parsed is None or parsed.tree is None:
        return None
    return next((n for n in parsed.tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _same_body(upstream: ast.FunctionDef, func: ast.FunctionDef) -> bool:
    """Whether ``func`` has the upstream method's body (formatting aside: what ``ast.dump`` compares);
    remembered per pair for the file (several rules ask about the same patched methods)."""
    if len(upstream.body) != len(func.body):
        return False
    memo = scoped_memo("upstream.same_body")
    key = (id(upstream), id(func))
    hit = memo.get(key)
    if hit is not None and hit[0] is upstream and hit[1] is func:
        return hit[2]  # type: ignore[no-any-return]
    same = all(same_node(a, b) for a, b in zip(func.body, upstream.body))
    memo[key] = (upstream, func, same)
    return same


def _same_without_moves(upstream: ast.FunctionDef, func: ast.FunctionDef) -> bool:
    """``_same_body`` with the moves of a name to another device (`x = x.to(y.device)`) left out of every
    statement list on both sides: such an edit computes nothing, so the method is still upstream's."""
    return same_node(func, upstream, skip=device_move, fields=("body",))


def _device_arg(node: ast.AST) -> bool:
    """A device and nothing else: `x.device`, a name `device` / `*_device`, `torch.device(...)`."""
    if isinstance(node, ast.Attribute):
        return node.attr == "device"
    if isinstance(node, ast.Name):
        return node.id == "device" or node.id.endswith("_device")
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "device"


def device_move(stmt: ast.stmt) -> bool:
    """`x = x.to(y.device)` (or `device=`): a name rebound to itself on another device, dtype and values
    unchanged: the numerics of the code around it are the same with or without it."""
    if not (
        isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
    ):
        return False
    call = stmt.value
    if not (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr == "to"
        and isinstance(call.func.value, ast.Name)
        and call.func.value.id == stmt.targets[0].id
    ):
        return False
    given = [*call.args, *(kw.value for kw in call.keywords if kw.arg in ("device", None))]
    others = [kw for kw in call.keywords if kw.arg not in ("device", "non_blocking")]
    return len(given) == 1 and not others and _device_arg(given[0])


def same_node(
    a: ast.AST,
    b: ast.AST,
    skip: Callable[[ast.stmt], bool] | None = None,
    fields: tuple[str, ...] | None = None,
) -> bool:
    """``ast.dump(a) == ast.dump(b)`` without building the strings: node types and fields compared pairwise
    (positions ignored), stopping at the first difference; constants compare by type and ``repr``. ``skip``
    leaves the statements it accepts out of every statement list on both sides; ``fields`` compares only those
    fields of ``a`` and ``b`` themselves."""
    AST = ast.AST
    if fields is None:
        stack: list[tuple[object, object]] = [(a, b)]
    else:
        stack = [(getattr(a, name, None), getattr(b, name, None)) for name in fields]
    while stack:
        x, y = stack.pop()
        if type(x) is not type(y):
            return False
        if isinstance(x, AST):
            for name in x._fields:
                stack.append((getattr(x, name, None), getattr(y, name, None)))
        elif type(x) is list:
            if skip is not None and (x and isinstance(x[0], ast.stmt) or y and isinstance(y[0], ast.stmt)):  # type: ignore[index]
                x = [s for s in x if not skip(s)]  # type: ignore[attr-defined]
                y = [s for s in y if not skip(s)]  # type: ignore[union-attr]
            if len(x) != len(y):  # type: ignore[arg-type]
                return False
            stack.extend(zip(x, y))  # type: ignore[call-overload]
        elif x != y and repr(x) != repr(y):
            return False
    return True


def patched_methods(
    tree: ast.Module,
    text: str,
    method: str,
    cls_suffixes: tuple[str, ...],
    new_ok: bool = False,
    path: str | None = None,
) -> list[PatchedMethod]:
    """Methods named ``method`` of classes ending with one of ``cls_suffixes`` that the file replaces (spec
    ``override_method`` functions) or holds (generated-file classes), each with its upstream original; only
    those whose body differs from the upstream one. ``new_ok``: also methods the upstream class lacks (a
    method VeOmni adds, such as ``get_position_id_func``), paired with an empty stand-in."""
    module = file_source_module(tree, text, path)
    if module is None or not module.startswith("transformers."):
        return []
    out: list[PatchedMethod] = []
    candidates: list[tuple[str, ast.FunctionDef]] = []
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef):
            target = decorator_target(stmt)
            if target is not None and target[1] == method:
                candidates.append((target[0], stmt))
        elif isinstance(stmt, ast.ClassDef):
            for item in stmt.body:
                if isinstance(item, ast.FunctionDef) and item.name == method:
                    candidates.append((stmt.name, item))
    for cls, func in candidates:
        if not cls.endswith(cls_suffixes):
            continue
        upstream = upstream_class_method(module, cls, method)
        if upstream is None and new_ok and upstream_class(module, cls) is not None:
            upstream = _empty_method(method)
        if upstream is None or _same_body(upstream, func) or _same_without_moves(upstream, func):
            continue
        out.append(PatchedMethod(module, cls, method, func, upstream))
    return out


@functools.lru_cache(maxsize=64)
def _empty_method(method: str) -> ast.FunctionDef:
    """``def <method>(self)`` with an empty body: what a class that does not define ``method`` has (one node per
    name, shared: read, never changed)."""
    node = ast.parse(f"def {method}(self):\n    pass").body[0]
    assert isinstance(node, ast.FunctionDef)
    node.body = []
    return node


# -- composite (multimodal) configs ------------------------------------------------------------------------


def _class_annotation(module: str, cls: str, attr: str, depth: int = 0) -> tuple[str, str] | None:
    """``(module, name)`` of the class annotation ``attr: Name`` upstream ``module.cls`` declares or inherits."""
    found = upstream_class(module, cls)
    if found is None or depth > 6:
        return None
    mod, node = found
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == attr:
            name = last_name(stmt.annotation)
            return (mod, name) if name else None
    for base in node.bases:
        base_name = last_name(base)
        if base_name and base_name not in ("Module", "object", "GenerationMixin"):
            result = _class_annotation(mod, base_name, attr, depth + 1)
            if result is not None:
                return result
    return None


def _config_fields(module: str, cls: str, depth: int = 0) -> frozenset[str] | None:
    """Every attribute a transformers config class defines: field annotations, class assignments,
    ``self.x = ...`` in its methods, methods and properties, ``attribute_map`` keys; bases followed.
    Remembered per transformers source and class (every composite config shares ``PretrainedConfig``)."""
    return _config_fields_at(transformers_root(), module, cls, depth)


@functools.lru_cache(maxsize=256)
def _config_fields_at(root: str | None, module: str, cls: str, depth: int) -> frozenset[str] | None:
    found = upstream_class(module, cls)
    if found is None or depth > 6:
        return None
    mod, node = found
    out: set[str] = set()
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            out.add(stmt.target.id)
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                if isinstance(target, ast.Name):
                    out.add(target.id)
                    if target.id == "attribute_map" and isinstance(stmt.value, ast.Dict):
                        out.update(k.value for k in stmt.value.keys if isinstance(k, ast.Constant))
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.add(stmt.name)
            for sub in walk(stmt):
                if isinstance(sub, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                    targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target]
                    for target in targets:
                        if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                            if target.value.id == "self":
                                out.add(target.attr)
    for base in node.bases:
        base_name = last_name(base)
        if base_name in (None, "object"):
            continue
        out |= _config_fields(mod, base_name, depth + 1) or set()  # type: ignore[arg-type]
    return frozenset(out)


@functools.lru_cache(maxsize=128)
def composite_config_fields(module: str, cls: str) -> tuple[str, frozenset[str], frozenset[str]] | None:
    """For an upstream model class whose config (the ``config: X`` class annotation, inherited) is a composite
    config with a ``text_config`` sub-config: (X's name, the fields X defines, the fields the text sub-config
    defines). None when the class is not such a model or a config cannot be read."""
    annotated = _class_annotation(module, cls, "config")
    if annotated is None:
        return None
    found = upstream_class(*annotated)
    if found is None:
        return None
    cfg_mod, node = found
    text_cls = None
    for stmt in node.body:
        if (
            isinstance(stmt, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "sub_configs" for t in stmt.targets)
            and isinstance(stmt.value, ast.Dict)
        ):
            for key, value in zip(stmt.value.keys, stmt.value.values):
                if (
                    isinstance(key, ast.Constant)
                    and key.value == "text_config"
                    and isinstance(value, ast.Name)
                ):
                    text_cls = value.id
    if text_cls is None:
        return None
    mine = _config_fields(cfg_mod, node.name)
    text = _config_fields(cfg_mod, text_cls)
    if mine is None or not text:
        return None
    return node.name, frozenset(mine), frozenset(text)


def composite_text_only_fields() -> frozenset[str]:
    """Fields that some composite transformers config (one with a ``text_config`` sub-config) does not define
    while its text sub-config does: read from such a composite config with a default, they silently take the
    default. Read from the installed transformers source; empty when it cannot be read."""
    root = transformers_dir()
    return _composite_text_only(str(root)) if root is not None else frozenset()


@functools.lru_cache(maxsize=4)
def _composite_text_only(root: str) -> frozenset[str]:
    base = frozenset(_config_fields("transformers.configuration_utils", "PreTrainedConfig") or ())
    out: set[str] = set()
    for path in sorted(Path(root, "models").glob("*/configuration_*.py")):
        try:
            text = read_text(path)
        except (OSError, ValueError):
            continue
        if "sub_configs" not in text or "text_config" not in text:
            continue
        # the run's one store: the upstream class reads share it
        from npu_lint.veomni.patchgen import load_file

        parsed = load_file(str(path))
        tree = parsed.tree if parsed is not None else None
        if tree is None:
            continue
        classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}

        def fields(name: str, depth: int = 0, classes: dict[str, ast.ClassDef] = classes) -> set[str]:
            node = classes.get(name)
            if node is None or depth > 6:
                return set()
            found: set[str] = set()
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    found.add(stmt.target.id)
                elif isinstance(stmt, ast.Assign):
                    found.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
                    if any(isinstance(t, ast.Name) and t.id == "attribute_map" for t in stmt.targets):
                        if isinstance(stmt.value, ast.Dict):
                            found.update(k.value for k in stmt.value.keys if isinstance(k, ast.Constant))
                elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found.add(stmt.name)
                    for sub in walk(stmt):
                        targets = sub.targets if isinstance(sub, ast.Assign) else []
                        if isinstance(sub, (ast.AnnAssign, ast.AugAssign)):
                            targets = [sub.target]
                        for target in targets:
                            if (
                                isinstance(target, ast.Attribute)
                                and isinstance(target.value, ast.Name)
                                and target.value.id == "self"
                            ):
                                found.add(target.attr)
            for b in node.bases:
                name_of = last_name(b)
                if name_of is not None:
                    found |= fields(name_of, depth + 1)
            return found

        for node in classes.values():
            for stmt in node.body:
                if not (
                    isinstance(stmt, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "sub_configs" for t in stmt.targets)
                    and isinstance(stmt.value, ast.Dict)
                ):
                    continue
                for key, value in zip(stmt.value.keys, stmt.value.values):
                    if (
                        isinstance(key, ast.Constant)
                        and key.value == "text_config"
                        and isinstance(value, ast.Name)
                    ):
                        text_fields = fields(value.id)
                        if value.id not in classes:
                            continue  # the text config lives in another module: not judged
                        out |= text_fields - fields(node.name) - base
    return frozenset(out)


HUB_DECORATORS = ("use_kernel_forward_from_hub", "use_kernel_func_from_hub")


def _device_keys(node: ast.expr) -> list[str]:
    """Device names of one hub-mapping entry: ``{"cuda": ..., Device(type="npu"): ...}``."""
    out: list[str] = []
    if not isinstance(node, ast.Dict):
        return out
    for key in node.keys:
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            out.append(key.value)
        elif isinstance(key, ast.Call):
            value = (
                key.args[0] if key.args else next((k.value for k in key.keywords if k.arg == "type"), None)
            )
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                out.append(value.value)
    return out


@functools.lru_cache(maxsize=4)
def _hub_mapping(path: Path, mtime: float) -> dict[str, tuple[str, ...]]:
    del mtime  # part of the cache key only
    try:
        tree = ast.parse(read_regular(path)[0], filename=str(path))
    except (OSError, SyntaxError, ValueError, RecursionError):
        return {}
    out: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        for target in targets:
            if (
                isinstance(target, ast.Name)
                and target.id == "_KERNEL_MAPPING"
                and isinstance(value, ast.Dict)
            ):
                for key, entry in zip(value.keys, value.values, strict=True):
                    if isinstance(key, ast.Constant) and isinstance(key.value, str):
                        out.setdefault(key.value, []).extend(_device_keys(entry))
            elif (
                isinstance(target, ast.Subscript)
                and isinstance(target.value, ast.Name)
                and target.value.id == "_KERNEL_MAPPING"
                and isinstance(target.slice, ast.Constant)
                and isinstance(target.slice.value, str)
                and value is not None
            ):
                out.setdefault(target.slice.value, []).extend(_device_keys(value))
    return {name: tuple(sorted(set(devices))) for name, devices in out.items()}


def hub_kernel_devices(name: str) -> tuple[str, ...] | None:
    """The devices for which the installed transformers maps the kernels-hub layer or function ``name``
    (``_KERNEL_MAPPING`` in ``transformers/integrations/hub_kernels.py``, read statically), or None when
    transformers is not found or does not map the name."""
    base = transformers_dir()
    if base is None:
        return None
    path = base / "integrations" / "hub_kernels.py"
    try:
        mtime = path.stat().st_mtime
    except OSError:
        return None
    return _hub_mapping(path, mtime).get(name)
