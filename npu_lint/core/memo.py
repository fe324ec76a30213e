"""Bounded caches: what a run (or a long-lived language server) remembers about files is kept for the most
recently used entries only, each keyed by the file's state by its owner."""

from __future__ import annotations

import ast
import dataclasses
import functools
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Bounded(Generic[K, V]):
    """A mapping that keeps its ``maxsize`` most recently used entries (``get`` and assignment count as a use)."""

    __slots__ = ("maxsize", "_data")

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._data: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K, default: V | None = None) -> V | None:
        data = self._data
        if key not in data:
            return default
        data.move_to_end(key)
        return data[key]

    def __getitem__(self, key: K) -> V:
        self._data.move_to_end(key)
        return self._data[key]

    def __setitem__(self, key: K, value: V) -> None:
        data = self._data
        data[key] = value
        data.move_to_end(key)
        while len(data) > self.maxsize:
            data.popitem(last=False)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)

    def clear(self) -> None:
        self._data.clear()


def per_tree(func: Callable[[ast.AST], V]) -> Callable[[ast.AST], V]:
    """``func(tree)`` once per tree object, held weakly (the entry goes with the tree). A file's parsed tree is
    its state (the run's store of parsed files, ``patchgen.load_file``, parses a file again when its size or
    mtime changes), so what is derived from a file's tree this way follows edits, where a memo keyed by the
    path would not."""
    store: weakref.WeakKeyDictionary[ast.AST, V] = weakref.WeakKeyDictionary()

    @functools.wraps(func)
    def wrapper(tree: ast.AST) -> V:
        try:
            return store[tree]
        except KeyError:
            value = store[tree] = func(tree)
            return value

    return wrapper


# -- analyses shared between files by content ---------------------------------------------------------------
#
# A model package's generated GPU and NPU files (and a spec beside its generated file) hold most of their
# functions verbatim, at other lines. An analysis that reads nothing but one node's subtree (a function's SP
# flow, its media crossings) gives the same answer for both copies, up to which nodes it names: ``by_content``
# computes it for the first copy, keeps a snapshot keyed by the node's text, and hands the next copy the
# snapshot with every node replaced by its counterpart in that copy (the two subtrees are paired node by node;
# identical text at the same column parses to the same shape, which the pairing checks). Only analyses that
# are functions of the subtree alone may use it, and only when their results hold nothing position-dependent
# but nodes (no line numbers in messages): the caller vouches for both, and passes whatever else the analysis
# reads as its arguments.

# one store of 512 entries per analysis: the per-function analyses (twin statements, unread twins, ...) asked
# for every function of every file would otherwise push the rarer ones (a function's SP flow) out of a shared
# store before the copy that could reuse them is linted
_CONTENT: dict[tuple[str, str], Bounded[tuple[object, ...], tuple[object, object]]] = {}
_PER_ANALYSIS = 512
_ATOMS = (str, int, float, bool, bytes, type(None))


class _Foreign(Exception):
    """A result holding something ``by_content`` cannot carry to another copy (a node outside the subtree, an
    object of an unknown type): it is computed afresh."""


def _segment(node: ast.AST, lines: list[str]) -> str | None:
    start = getattr(node, "lineno", None)
    end = getattr(node, "end_lineno", None)
    if start is None or end is None:
        return None
    for deco in getattr(node, "decorator_list", ()):
        start = min(start, deco.lineno)
    if end > len(lines):
        return None
    return "\n".join(lines[start - 1 : end])


class _Pairs:
    """``id(node)`` of every node of ``old``'s subtree -> its counterpart in ``new``'s, listed at the first
    lookup (a result naming no node needs none); both subtrees in ``walk`` order, which must match type by type."""

    __slots__ = ("old", "new", "table")

    def __init__(self, old: ast.AST, new: ast.AST) -> None:
        self.old, self.new = old, new
        self.table: dict[int, ast.AST] | None = None

    def get(self, node: ast.AST) -> ast.AST | None:
        if self.table is None:
            from npu_lint.core.astutil import walk

            old, new = walk(self.old), walk(self.new)
            if len(old) != len(new) or list(map(type, old)) != list(map(type, new)):
                raise _Foreign
            self.table = dict(zip(map(id, old), new))
        return self.table.get(id(node))


def _carry(value: object, nodes: _Pairs | None, seen: dict[int, object]) -> object:
    """``value`` rebuilt (containers and dataclasses copied, sharing kept) with each node mapped by ``nodes``
    (kept as is when ``nodes`` is None)."""
    if isinstance(value, _ATOMS):
        return value
    if isinstance(value, ast.AST):
        if nodes is None:
            return value
        found = nodes.get(value)
        if found is None:
            raise _Foreign
        return found
    key = id(value)
    if key in seen:
        return seen[key]
    typ = type(value)
    if typ is list:
        out_list: list[object] = []
        seen[key] = out_list
        out_list.extend(_carry(v, nodes, seen) for v in value)  # type: ignore[attr-defined]
        return out_list
    if typ is dict:
        out_dict: dict[object, object] = {}
        seen[key] = out_dict
        for k, v in value.items():  # type: ignore[attr-defined]
            out_dict[_carry(k, nodes, seen)] = _carry(v, nodes, seen)
        return out_dict
    if typ in (tuple, set, frozenset):
        out = typ(_carry(v, nodes, seen) for v in value)  # type: ignore[attr-defined]
        seen[key] = out
        return out
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        copy = object.__new__(typ)
        seen[key] = copy
        for f in dataclasses.fields(value):
            object.__setattr__(copy, f.name, _carry(getattr(value, f.name), nodes, seen))
        return copy
    raise _Foreign


def by_content(
    analysis: Callable[..., V],
    node: ast.AST,
    lines: list[str],
    *args: Hashable,
    unkeyed: tuple[object, ...] = (),
) -> V:
    """``analysis(node, *args)``, a function of ``node``'s subtree and ``args`` alone, shared with every node of
    the same text (``lines``: its file's lines, as ``SourceFile.lines``) that was analysed earlier in the process.
    ``unkeyed`` are passed after ``args`` but are not part of the key (what carries the analysis, not an input
    of it: a rule instance whose method it runs)."""
    segment = _segment(node, lines)
    if segment is None:
        return analysis(node, *args, *unkeyed)
    name = (analysis.__module__, analysis.__qualname__)
    store = _CONTENT.get(name)
    if store is None:
        store = _CONTENT[name] = Bounded(_PER_ANALYSIS)
    key = (args, getattr(node, "col_offset", -1), segment)
    hit = store.get(key)
    if hit is not None:
        old, snapshot = hit
        try:
            return _carry(snapshot, None if old is node else _Pairs(old, node), {})  # type: ignore[return-value]
        except _Foreign:
            pass
    result = analysis(node, *args, *unkeyed)
    try:  # a copy: the caller may change what it was handed
        store[key] = (node, _carry(result, None, {}))
    except _Foreign:
        pass
    return result
