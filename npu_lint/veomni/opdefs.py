"""The custom operators a VeOmni tree defines itself, and which tree modules a module's import loads.

``torch.ops.<ns>.<op>`` resolves only once the module that defines the operator has run: a
``@torch.library.custom_op("ns::op")`` / ``triton_op`` decorator, ``torch.library.define("ns::op(...)")``, or a
``torch.library.Library("ns", "DEF")`` whose ``define("op(...)")`` names it. :func:`tree_op_definitions` reads
those definitions from the tree's files (the project's one listing, parsed through the run's store of parsed
files); :func:`import_closure` gives the tree modules that loading a file loads (its enclosing packages'
``__init__`` and, transitively, every tree module they import). Operators the tree does not define (torch's,
torch_npu's, an extension package's) are not described here: the names come from the tree, never from a
built-in catalog. Asked by NPU320.

:func:`tree_import_requirements` reads what the tree says a module's import loads from outside the tree: a
``try: from .m import f`` whose ``except ImportError as e`` handler tests ``e.name == "pkg"`` (or
``e.name in (...)``) declares that importing ``m`` imports ``pkg`` (an extension that registers operators, an
optional backend); :func:`imports_package` tells whether a file imports a package anywhere. Asked by NPU323.
"""

from __future__ import annotations

import ast
import os
import weakref
from collections.abc import Iterator
from dataclasses import dataclass

from npu_lint.core.astutil import absolute_module, call_name, statements, str_value, walk
from npu_lint.core.safeio import MAX_SMALL_BYTES, read_text
from npu_lint.veomni import patchgen

_DEFINERS = frozenset({"custom_op", "triton_op", "define"})
_MARKERS = ("::", "Library(")

_IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError"})


@dataclass(frozen=True)
class ImportRequirement:
    """``try: from .m import f`` / ``except ImportError as e: if e.name == "pkg"`` at ``file:line``: importing
    the tree module ``module`` is declared to import the external package ``package``."""

    file: str
    line: int
    module: str
    package: str


def _named_packages(handler: ast.ExceptHandler) -> list[tuple[str, int]]:
    """The package names a handler compares its exception's ``.name`` with (``e.name == "x"``,
    ``e.name in ("x", "y")``), with the comparison's line."""
    if handler.name is None:
        return []
    out: list[tuple[str, int]] = []
    for node in ast.walk(handler):
        if not isinstance(node, ast.Compare) or len(node.ops) != 1:
            continue
        left, right = node.left, node.comparators[0]
        if not (
            isinstance(left, ast.Attribute)
            and left.attr == "name"
            and isinstance(left.value, ast.Name)
            and left.value.id == handler.name
        ):
            continue
        values = right.elts if isinstance(right, (ast.Tuple, ast.List, ast.Set)) else [right]
        out.extend((v, node.lineno) for v in map(str_value, values) if v)
    return out


def file_import_requirements(file: str, root: str, tree: ast.Module) -> list[ImportRequirement]:
    """The import requirements one file's handlers declare (see :class:`ImportRequirement`)."""
    module, is_package = _module_name(file, root)
    out: list[ImportRequirement] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Try):
            continue
        named: list[tuple[str, int]] = []
        for handler in node.handlers:
            caught = handler.type
            kinds = caught.elts if isinstance(caught, ast.Tuple) else [caught] if caught is not None else []
            if any(isinstance(k, ast.Name) and k.id in _IMPORT_ERRORS for k in kinds):
                named.extend(_named_packages(handler))
        if not named:
            continue
        direct: set[str] = set()
        guarded: list[str] = []
        for stmt in node.body:
            for sub in ast.walk(stmt):
                if isinstance(sub, ast.Import):
                    direct.update(a.name.split(".")[0] for a in sub.names)
                elif isinstance(sub, ast.ImportFrom):
                    base = absolute_module(module, is_package, sub.level, sub.module)
                    # `from .pkg import sub`: the submodule, when it is one, is what the import loads
                    subs = [
                        f"{base}.{a.name}"
                        for a in sub.names
                        if base and _module_file(root, f"{base}.{a.name}")
                    ]
                    if subs:
                        guarded.extend(subs)
                    elif base and _module_file(root, base) is not None:
                        guarded.append(base)
                    elif base:
                        direct.add(base.split(".")[0])
        for target in guarded:
            out.extend(
                ImportRequirement(file, line, target, package)
                for package, line in named
                if package.split(".")[0] not in direct
            )
    return out


def tree_import_requirements(files: tuple[str, ...], root: str) -> tuple[ImportRequirement, ...]:
    """Every import requirement the tree's handlers declare. Reads every file: a rule asks once per project
    (``Project.remember``), so the answer goes with the project when a file changes."""
    found: list[ImportRequirement] = []
    for file in files:
        try:
            text = read_text(file, limit=MAX_SMALL_BYTES)
        except (OSError, UnicodeDecodeError):
            continue
        if ".name" not in text or not any(kind in text for kind in _IMPORT_ERRORS):
            continue
        parsed = patchgen.load_file(file)
        if parsed is None or parsed.tree is None:
            continue
        found.extend(file_import_requirements(file, root, parsed.tree))
    return tuple(found)


def imports_package(file: str, root: str, package: str, tree: ast.Module | None = None) -> bool:
    """Whether a file imports ``package`` (or one of its submodules) anywhere."""
    return any(m == package or m.startswith(package + ".") for m in _imported_modules(file, root, tree))


def module_file(root: str, module: str) -> str | None:
    """The file of a tree module (its ``__init__`` for a package), if the tree has it."""
    return _module_file(root, module)


def _schema_name(text: str) -> str:
    """``"op(Tensor x) -> Tensor"`` / ``"op.overload(...)"`` -> ``op``."""
    return text.split("(", 1)[0].split(".", 1)[0].strip()


def file_op_definitions(tree: ast.Module) -> list[tuple[str, str, int]]:
    """``(namespace, op, line)`` for each operator a module defines."""
    libraries: dict[str, str] = {}  # name bound to a Library -> its namespace
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and call_name(node.value) == "Library"
            and node.value.args
        ):
            namespace = str_value(node.value.args[0])
            if namespace:
                for target in node.targets:
                    if isinstance(target, (ast.Name, ast.Attribute)):
                        libraries[ast.unparse(target)] = namespace
    out: list[tuple[str, str, int]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or call_name(node) not in _DEFINERS or not node.args:
            continue
        text = str_value(node.args[0])
        if not text:
            continue
        if "::" in text:
            namespace, _sep, rest = text.partition("::")
            op = _schema_name(rest)
            if namespace and op:
                out.append((namespace.strip(), op, node.lineno))
        elif isinstance(node.func, ast.Attribute) and ast.unparse(node.func.value) in libraries:
            op = _schema_name(text)
            if op:
                out.append((libraries[ast.unparse(node.func.value)], op, node.lineno))
    return out


def tree_op_definitions(files: tuple[str, ...]) -> dict[tuple[str, str], tuple[tuple[str, int], ...]]:
    """Every operator the tree's files define, with where. Reads every file: a rule asks once per project
    (``Project.remember``)."""
    found: dict[tuple[str, str], list[tuple[str, int]]] = {}
    for file in files:
        try:
            text = read_text(file, limit=MAX_SMALL_BYTES)
        except (OSError, UnicodeDecodeError):
            continue
        if not any(marker in text for marker in _MARKERS):
            continue
        parsed = patchgen.load_file(file)
        if parsed is None or parsed.tree is None:
            continue
        for namespace, op, line in file_op_definitions(parsed.tree):
            found.setdefault((namespace, op), []).append((file, line))
    return {key: tuple(where) for key, where in found.items()}


def _module_file(root: str, module: str) -> str | None:
    parts = module.split(".")
    for candidate in (os.path.join(root, *parts) + ".py", os.path.join(root, *parts, "__init__.py")):
        if os.path.isfile(candidate):
            return candidate
    return None


def _with_packages(root: str, module: str) -> list[str]:
    """The files importing ``module`` runs: each enclosing package's ``__init__`` and the module itself."""
    parts = module.split(".")
    out = []
    for i in range(1, len(parts) + 1):
        file = _module_file(root, ".".join(parts[:i]))
        if file is not None:
            out.append(file)
    return out


# parsed tree -> {(file, root): the modules it imports}; a tree is a file's state (patchgen.load_file keeps one per
# mtime and size), so an edited file gets a new tree and a new answer, and the entry goes with the tree
_IMPORTS: weakref.WeakKeyDictionary[ast.Module, dict[tuple[str, str], frozenset[str]]] = (
    weakref.WeakKeyDictionary()
)


def _imported_modules(file: str, root: str, tree: ast.Module | None = None) -> frozenset[str]:
    """The absolute modules a file imports anywhere (a ``from M import name`` also names ``M.name``, a
    submodule perhaps); computed once per parsed tree."""
    text: str | None = None
    if tree is None:
        parsed = patchgen.load_file(file)
        if parsed is None or parsed.tree is None:
            return frozenset()
        tree, text = parsed.tree, parsed.text
    per_tree = _IMPORTS.setdefault(tree, {})
    hit = per_tree.get((file, root))
    if hit is None:
        hit = per_tree[(file, root)] = frozenset(_read_imports(file, root, tree, text))
    return hit


def _read_imports(file: str, root: str, tree: ast.Module, text: str | None = None) -> set[str]:
    """The modules ``tree`` (the file ``file`` of the tree at ``root``, whose text is ``text`` when given)
    imports anywhere. Imports are statements: when the text cannot spell an ``import_module`` or ``__import__``
    call (ASCII, neither word), only the statement lists are followed, not every expression node."""
    module, is_package = _module_name(file, root)
    out: set[str] = set()
    nodes = (
        statements(tree)
        if text is not None and text.isascii() and "import_module" not in text and "__import__" not in text
        else walk(tree)
    )
    for node in nodes:
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = absolute_module(module, is_package, node.level, node.module)
            if base:
                out.add(base)
                out.update(f"{base}.{a.name}" for a in node.names if a.name != "*")
        elif isinstance(node, ast.Call) and call_name(node) in ("import_module", "__import__") and node.args:
            name = str_value(node.args[0])
            if name:
                level = len(name) - len(name.lstrip("."))
                out.add(absolute_module(module, is_package, level, name[level:] or None) or name)
    return out


def _module_name(file: str, root: str) -> tuple[str, bool]:
    rel = os.path.relpath(file, root)
    parts = rel[:-3].split(os.sep) if rel.endswith(".py") else rel.split(os.sep)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts = parts[:-1]
    return ".".join(parts), is_package


def import_closure(file: str, root: str, tree: ast.Module | None = None, limit: int = 2000) -> set[str]:
    """The real paths of the tree files loaded when ``file`` (parsed as ``tree``, when given) is imported: its
    enclosing packages' ``__init__``, itself, and every tree module those import (anywhere in them),
    transitively."""
    return set(closure_files(file, root, tree, limit))


def closure_files(file: str, root: str, tree: ast.Module | None = None, limit: int = 2000) -> Iterator[str]:
    """``import_closure``'s files, one by one in the order it finds them (a caller looking for one file that
    does something stops there, without reading the rest of the tree)."""
    module, _is_package = _module_name(file, root)
    todo = [*_with_packages(root, module)]
    seen: set[str] = {os.path.realpath(file)}
    yield os.path.realpath(file)
    for target in _imported_modules(file, root, tree):
        if target.split(".")[0] == "veomni":
            todo.extend(_with_packages(root, target))
    while todo and len(seen) < limit:
        current = todo.pop()
        real = os.path.realpath(current)
        if real in seen:
            continue
        seen.add(real)
        yield real
        for target in _imported_modules(current, root):
            if target.split(".")[0] == "veomni":
                todo.extend(_with_packages(root, target))
