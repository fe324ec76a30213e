"""Small static helpers shared by rules, fixers, the patchgen model and the audit (stdlib only)."""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path, PurePath


def dotted_name(node: ast.AST) -> str | None:
    """``a.b.c`` for a Name/Attribute chain (no import resolution), else None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


_IMPORT_FUNCTIONS = frozenset({"import_module", "importlib.import_module", "__import__"})


def literal_import(node: ast.AST) -> str | None:
    """The module a dynamic import with a literal name loads: ``importlib.import_module("torch_npu")``,
    ``import_module("a.b")`` -> ``a.b``; ``__import__("a.b")`` -> ``a`` (its value is the top package unless
    ``fromlist`` is given). Syntactic: the caller resolves ``import_module`` aliases if it must."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    name = dotted_name(node.func)
    if name not in _IMPORT_FUNCTIONS:
        return None
    first = node.args[0]
    if not (isinstance(first, ast.Constant) and isinstance(first.value, str) and first.value):
        return None
    module = first.value
    if name == "__import__":
        fromlist = (
            node.args[3]
            if len(node.args) > 3
            else next((k.value for k in node.keywords if k.arg == "fromlist"), None)
        )
        empty = fromlist is None or (isinstance(fromlist, (ast.List, ast.Tuple)) and not fromlist.elts)
        if empty:
            return module.split(".")[0]
    return module


def literal_getattr(node: ast.AST) -> tuple[ast.expr, str] | None:
    """(object, attribute) of ``getattr(obj, "literal")`` / ``getattr(obj, "literal", default)``."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "getattr"
        and len(node.args) in (2, 3)
        and not node.keywords
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
        and node.args[1].value.isidentifier()
    ):
        return node.args[0], node.args[1].value
    return None


@functools.lru_cache(maxsize=1)
def transformers_dir() -> Path | None:
    """Directory of the installed ``transformers`` package, found without importing it."""
    try:
        spec = importlib.util.find_spec("transformers")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


# fields that never hold a node (identifiers, numbers, flags): walk() does not read them
_NO_NODE_FIELDS = frozenset(
    ("id", "attr", "name", "arg", "module", "level", "kind", "type_comment", "asname", "conversion",
     "is_async", "simple", "tag")
)  # fmt: skip
_WALK_FIELDS: dict[type, tuple[str, ...]] = {}


def walk_pairs(node: ast.AST) -> list[tuple[ast.AST, ast.AST]]:
    """(child, parent) for every node under ``node``, children in exactly ``ast.walk`` order (so ``[node,
    *children]`` is ``list(ast.walk(node))`` and each parent's children come in ``iter_child_nodes`` order).
    The last answer is kept: helpers asking about the same function share one walk."""
    if _LAST_PAIRS and _LAST_PAIRS[0][0] is node:
        return _LAST_PAIRS[0][1]
    out: list[tuple[ast.AST, ast.AST]] = []
    append = out.append
    AST = ast.AST
    fields_of = _WALK_FIELDS
    queue = [node]
    push = queue.append
    for sub in queue:
        typ = type(sub)
        fields = fields_of.get(typ)
        if fields is None:
            fields = _walk_fields(typ)
        for name in fields:
            value = getattr(sub, name, None)
            if isinstance(value, AST):
                push(value)
                append((value, sub))
            elif type(value) is list:
                for item in value:
                    if isinstance(item, AST):
                        push(item)
                        append((item, sub))
    _LAST_PAIRS[:] = [(node, out)]
    return out


_LAST_PAIRS: list[tuple[ast.AST, list[tuple[ast.AST, ast.AST]]]] = []


def _walk_fields(typ: type) -> tuple[str, ...]:
    fields = _WALK_FIELDS[typ] = tuple(
        f
        for f in typ._fields  # type: ignore[attr-defined]
        if f not in _NO_NODE_FIELDS and not (typ is ast.Constant and f == "value")
    )
    return fields


def walk(node: ast.AST) -> list[ast.AST]:
    """Every node of ``node``'s subtree, in exactly the order of ``ast.walk`` (breadth first, children in
    field order, contexts and operators included), as a list: several times faster than the generator."""
    out = [node]
    append = out.append
    AST = ast.AST
    fields_of = _WALK_FIELDS
    for sub in out:  # the list grows while it is read: breadth-first order
        typ = type(sub)
        fields = fields_of.get(typ)
        if fields is None:
            fields = _walk_fields(typ)
        for name in fields:
            value = getattr(sub, name, None)
            if isinstance(value, AST):
                append(value)
            elif type(value) is list:
                for item in value:
                    if isinstance(item, AST):
                        append(item)
    return out


def module_package(path: str) -> list[str]:
    """The dotted package of a file (``veomni.models_kernel.transformers.toy``), for relative imports; [] when
    unknown. On disk the package is read from the ``__init__.py`` chain; for a path that is not on disk (an
    editor buffer, an example) from the last ``veomni`` component of the path."""
    p = Path(path)
    if p.parent.joinpath("__init__.py").is_file():
        parts: list[str] = []
        d = p.parent.resolve()
        while d.joinpath("__init__.py").is_file() and d.parent != d:
            parts.append(d.name)
            d = d.parent
        return parts[::-1]
    dirs = PurePath(path.replace("\\", "/")).parts[:-1]
    for i in range(len(dirs) - 1, -1, -1):
        if dirs[i] == "veomni":
            return list(dirs[i:])
    return []


def resolve_relative(path: str, module: str) -> str:
    """``....ops.kernels.x`` -> ``veomni.ops.kernels.x`` given the file's path (unchanged if not relative)."""
    if not module.startswith("."):
        return module
    level = len(module) - len(module.lstrip("."))
    rest = module[level:]
    package = module_package(path)
    if not package or level - 1 > len(package):
        return module
    base = package[: len(package) - (level - 1)]
    return ".".join([*base, rest] if rest else base)
