"""Integer constants of a VeOmni tree's data contract (``IGNORE_INDEX``, the media placeholder indices), read
statically from the module that defines them."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from npu_lint.core.safeio import read_regular

# where VeOmni defines the data contract's constants (first match wins), relative to the tree root
_CANDIDATES = ("veomni/utils/constants.py", "veomni/data/constants.py")


@functools.lru_cache(maxsize=32)
def _module_ints(path: str) -> dict[str, int]:
    try:
        data, _ = read_regular(path)
        tree = ast.parse(data)
    except (OSError, SyntaxError, ValueError, RecursionError):
        return {}
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
