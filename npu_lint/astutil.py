"""Small static helpers shared by rules, fixers, the patchgen model and the audit (stdlib only)."""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path


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
