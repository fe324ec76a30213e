"""Sample packing in collators: where per-sample sequences are concatenated into one packed row, and whether the
labels' sample boundaries are masked on the way.

A packing collator gathers each key's per-sample tensors (``batch[key].append(feature[key])`` over the
features) and concatenates them along the sequence (``torch.cat(batch[key], dim=-1)``). For ``labels`` the first
label of every sample but the first must become ``IGNORE_INDEX`` (VeOmni's ``PackingCollator``), else the last
token of one sample is trained to predict the first token of the next, unrelated one.

* ``unmasked_packs(func)``: the concatenation calls of ``func`` that pack the labels' per-sample list (a list
  filled from the features in the same function, named for labels or indexed by a loop's key) while nothing in
  the function masks with the ignore index (no ``IGNORE_INDEX`` / ``ignore_index`` / ``-100`` read at all).
* ``packs_labels(func, cls, text)``: whether the function (or its class) is named for packing or collation
  in a file that names a ``labels`` key.
"""

from __future__ import annotations

import ast

from npu_lint.core.astutil import own_nodes

__all__ = ["packs_labels", "unmasked_packs"]

_CONCAT = frozenset({"cat", "concat", "concatenate"})
_APPEND = frozenset({"append", "extend"})


def _ignore(node: ast.AST) -> bool:
    if isinstance(node, ast.Name):
        return "ignore" in node.id.lower()
    if isinstance(node, ast.Attribute):
        return "ignore" in node.attr.lower()
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return "ignore" in node.value.lower()
    return (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and node.operand.value == 100
    )


def _root(expr: ast.expr) -> str | None:
    """The local name a list expression hangs off (``batch`` for ``batch[key]``, ``labels`` for ``labels``)."""
    while isinstance(expr, ast.Subscript):
        expr = expr.value
    return expr.id if isinstance(expr, ast.Name) else None


def unmasked_packs(func: ast.AST) -> list[ast.Call]:
    """The ``cat``/``concat`` calls of ``func`` (outside nested scopes) concatenating a per-sample list that
    ``func`` itself fills in a loop (``.append``/``.extend`` inside a ``for``), when ``func`` reads no ignore
    index anywhere. Empty when it masks (or reads the ignore index for any other reason)."""
    nodes = own_nodes(func)
    filled: set[str] = set()
    calls: list[ast.Call] = []
    for node in nodes:
        if _ignore(node):
            return []
        if isinstance(node, ast.For):
            for inner in ast.walk(node):
                if (
                    isinstance(inner, ast.Call)
                    and isinstance(inner.func, ast.Attribute)
                    and inner.func.attr in _APPEND
                ):
                    root = _root(inner.func.value)
                    if root is not None:
                        filled.add(root)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _CONCAT
            and node.args
            and not isinstance(node.args[0], (ast.Tuple, ast.List))
        ):
            calls.append(node)
    packs = [c for c in calls if _root(c.args[0]) in filled]
    labelled = [c for c in packs if _labels(c.args[0])]
    if labelled:
        return labelled
    # a loop over every key (``batch[key]``) packs the labels with the rest
    return [c for c in packs if isinstance(c.args[0], ast.Subscript) and not _const_key(c.args[0])]


def _labels(expr: ast.expr) -> bool:
    """Whether a list expression is the labels' (``labels``, ``batch["labels"]``, ``label_rows``)."""
    while isinstance(expr, ast.Subscript):
        if isinstance(expr.slice, ast.Constant) and isinstance(expr.slice.value, str):
            return "label" in expr.slice.value
        expr = expr.value
    return isinstance(expr, ast.Name) and "label" in expr.id.lower()


def _const_key(expr: ast.Subscript) -> bool:
    return isinstance(expr.slice, ast.Constant)


def packs_labels(func: ast.AST, cls: ast.ClassDef | None, text: str) -> bool:
    """Whether ``func`` is a packing step that handles labels: it (or its class) is named for packing or
    collation and the file names a ``labels`` key."""
    names = [getattr(func, "name", "")]
    if cls is not None:
        names.append(cls.name)
    named = any("pack" in n.lower() or "collat" in n.lower() for n in names)
    return named and ('"labels"' in text or "'labels'" in text)
