"""Integer constants of a VeOmni tree's data contract (``IGNORE_INDEX``, the media placeholder indices), read
statically from the module that defines them."""

from __future__ import annotations

import ast
from pathlib import Path

from npu_lint.core.memo import per_tree
from npu_lint.veomni.patchgen import load_file

# where VeOmni defines the data contract's constants (first match wins), relative to the tree root
_CANDIDATES = ("veomni/utils/constants.py", "veomni/data/constants.py")


def _module_ints(path: str) -> dict[str, int]:
    parsed = load_file(path)  # the run's one tree of the file (a new one when the file changed)
    tree = parsed.tree if parsed is not None else None
    return _ints_of(tree) if tree is not None else {}


@per_tree
def _ints_of(tree: ast.AST) -> dict[str, int]:
    assert isinstance(tree, ast.Module)
    out: dict[str, int] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            value = stmt.value
            if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub):
                value = value.operand
                sign = -1
            else:
                sign = 1
            if isinstance(value, ast.Constant) and type(value.value) is int:
                out[stmt.targets[0].id] = sign * value.value
    return out


def tree_constant(root: str | None, name: str) -> int | None:
    """The integer value of the module-level constant ``name`` in the tree at ``root`` (None: not found)."""
    if root is None:
        return None
    for rel in _CANDIDATES:
        path = Path(root, rel)
        if path.is_file():
            value = _module_ints(str(path)).get(name)
            if value is not None:
                return value
    return None


# the tree's loss entry points: their `ignore_index` default is the data contract when no IGNORE_INDEX is defined
_LOSS_MODULES = (
    "veomni/models_kernel/loss_utils/__init__.py",
    "veomni/models/loss_utils.py",
    "veomni/models/loss_utils/__init__.py",
    "veomni/ops/kernels/cross_entropy/__init__.py",
    "veomni/ops/kernels/cross_entropy/eager.py",
)


def _ignore_defaults(path: str) -> frozenset[int]:
    parsed = load_file(path)  # the run's one tree of the file (a new one when the file changed)
    tree = parsed.tree if parsed is not None else None
    return _ignore_defaults_of(tree) if tree is not None else frozenset()


@per_tree
def _ignore_defaults_of(tree: ast.AST) -> frozenset[int]:
    found: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        args = node.args
        positional = [*args.posonlyargs, *args.args]
        pairs = list(zip(positional[len(positional) - len(args.defaults) :], args.defaults))
        pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
        for arg, default in pairs:
            if arg.arg != "ignore_index":
                continue
            value, sign = default, 1
            if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub):
                value, sign = value.operand, -1
            if isinstance(value, ast.Constant) and type(value.value) is int:
                found.add(sign * value.value)
    return frozenset(found)


def tree_ignore_index(root: str | None) -> int | None:
    """The label value the tree's data contract ignores: its ``IGNORE_INDEX`` constant, else the one ``ignore_index``
    default its loss entry points agree on (None: not found, or they disagree)."""
    value = tree_constant(root, "IGNORE_INDEX")
    if value is not None or root is None:
        return value
    found: set[int] = set()
    for rel in _LOSS_MODULES:
        path = Path(root, rel)
        if path.is_file():
            found |= _ignore_defaults(str(path))
    return next(iter(found)) if len(found) == 1 else None
