"""Symmetric twins in VeOmni code: names that differ only by one word of a pair (``q_bias``/``k_bias``,
``image_grid_thw``/``video_grid_thw``, ``input_splits``/``output_splits``, ``height``/``width``).

Code that handles one twin handles the other the same way: the tower of each medium, the projection of query
and key, the split sizes of both directions of an all-to-all. A function that binds both twins (as parameters or
assignments) and reads one of them only is the shape a copy-paste slip leaves (``norm_q_weight`` written where
``norm_k_weight`` was meant): the slipped twin is bound and never read.
"""

from __future__ import annotations

import ast

from npu_lint.core.astutil import nodes_of, own_nodes

PAIRS: tuple[tuple[str, str], ...] = (
    ("image", "video"),
    ("images", "videos"),
    ("q", "k"),
    ("query", "key"),
    ("height", "width"),
    ("input", "output"),
    ("start", "end"),
    ("cos", "sin"),
    ("src", "dst"),
    ("gate", "up"),
    ("row", "col"),
    ("pos", "neg"),
)
_SWAP = {a: b for a, b in PAIRS} | {b: a for a, b in PAIRS}


def twins_of(name: str) -> list[tuple[str, str]]:
    """(twin name, swapped word) for each word of ``name`` (split at ``_``) that has a twin."""
    words = name.split("_")
    out = []
    for i, word in enumerate(words):
        other = _SWAP.get(word)
        if other is not None:
            out.append(("_".join([*words[:i], other, *words[i + 1 :]]), word))
    return out


def unread_twins(func: ast.FunctionDef | ast.AsyncFunctionDef) -> list[tuple[ast.AST, str, str]]:
    """(binding node, name, twin) for each name ``func`` binds (a parameter, a plain assignment of its own:
    not an element of an unpacked tuple, which often discards fields) and never reads anywhere inside it,
    whose twin it binds too and reads, while another name of the same side (a word the name shares) is read:
    the side is in use, only this one name of it was slipped. A function that ignores a whole side (a
    processor without video support taking ``video_sizes``) is not judged."""
    bound: dict[str, ast.AST] = {}
    args = func.args
    for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs):
        bound.setdefault(arg.arg, arg)
    unpacked: set[int] = set()
    for node in own_nodes(func):
        if isinstance(node, (ast.Tuple, ast.List)) and isinstance(node.ctx, ast.Store):
            unpacked.update(id(e) for e in node.elts)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and id(node) not in unpacked:
            bound.setdefault(node.id, node)
    candidates = {n: twins_of(n) for n in bound if not n.startswith("_")}
    candidates = {n: t for n, t in candidates.items() if any(x in bound for x, _ in t)}
    if not candidates:
        return []
    read = {n.id for n in nodes_of(func, ast.Name) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    out = []
    for name, twins in candidates.items():
        if name in read:
            continue
        for twin, word in twins:
            if twin in bound and twin in read and any(word in r.split("_") for r in read if r != twin):
                out.append((_slip(func, twin, word) or bound[name], name, twin))
                break
    return out


def _slip(func: ast.FunctionDef | ast.AsyncFunctionDef, twin: str, word: str) -> ast.AST | None:
    """The read of ``twin`` in a simple statement that also reads a name of the other side (``word``):
    ``F.linear(x, k_weight, q_bias)`` for an unread ``k_bias``; None when no statement mixes them."""
    for stmt in own_nodes(func):
        if not isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Return)):
            continue
        names = [
            n for n in nodes_of(stmt, ast.Name) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
        ]
        hit = next((n for n in names if n.id == twin), None)
        if hit is not None and any(word in n.id.split("_") for n in names if n.id != twin):
            return hit
    return None
