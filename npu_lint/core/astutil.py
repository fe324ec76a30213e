"""Small static helpers shared by rules, fixers, the patchgen model and the audit (stdlib only)."""

from __future__ import annotations

import ast
import bisect
import contextlib
import functools
import hashlib
import importlib.util
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePath
from typing import Any

from npu_lint.core.memo import Bounded
from npu_lint.core.safeio import read_text


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


_TRANSFORMERS_OVERRIDE: list[str] = []

TRANSFORMERS_SRC_ENV = "NPU_LINT_TRANSFORMERS_SRC"


@contextlib.contextmanager
def use_transformers_root(path: str) -> Iterator[None]:
    """Read ``transformers`` from ``path`` (a directory named like the package) inside the block (tests)."""
    _TRANSFORMERS_OVERRIDE.append(path)
    try:
        yield
    finally:
        _TRANSFORMERS_OVERRIDE.pop()


def transformers_dir() -> Path | None:
    """Directory of the ``transformers`` source every reader uses, found without importing it: the one
    resolver. ``use_transformers_root`` (tests) first, then ``NPU_LINT_TRANSFORMERS_SRC`` (None when it is not
    a directory), then the installed package."""
    if _TRANSFORMERS_OVERRIDE:
        return Path(_TRANSFORMERS_OVERRIDE[-1])
    override = os.environ.get(TRANSFORMERS_SRC_ENV)
    if override:
        return Path(override) if os.path.isdir(override) else None
    return _installed_transformers_dir()


@functools.lru_cache(maxsize=1)
def _installed_transformers_dir() -> Path | None:
    try:
        spec = importlib.util.find_spec("transformers")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


_VERSION_LINE = re.compile(r"""^__version__\s*=\s*["']([^"']+)["']""", re.M)


def transformers_version() -> str | None:
    """Version of the ``transformers`` source :func:`transformers_dir` resolves (its ``__version__`` line;
    the installed distribution's metadata when the line is absent)."""
    base = transformers_dir()
    if base is None:
        return None
    try:
        head = read_text(base / "__init__.py", limit=1 << 20)[:65536]
    except (OSError, UnicodeDecodeError):
        head = ""
    match = _VERSION_LINE.search(head)
    if match:
        return match.group(1)
    if base != _installed_transformers_dir():
        return None
    import importlib.metadata

    try:
        return importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return None


def transformers_state(models: Iterable[str] = ()) -> str:
    """A cheap, stat-only digest of the state of the ``transformers`` source :func:`transformers_dir` resolves,
    for cache keys: a git checkout or an editable install changes its files without changing its version.

    Covers the package directory, its ``__init__.py`` and top-level modules, the ``models`` directory and each
    model directory in it (a model added, removed or renamed, a file replaced: git checkouts and atomic saves),
    and the files of the model directories named in ``models`` (edits in place). Never reads a file."""
    base = transformers_dir()
    if base is None:
        return "-"
    h = hashlib.sha256()

    def add(path: str, st: os.stat_result) -> None:
        h.update(
            f"{path}\0{st.st_mode}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}\0".encode(
                "utf-8", "surrogateescape"
            )
        )

    def scan(directory: str, depth: int) -> None:
        try:
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            h.update(f"{directory}\0missing\0".encode("utf-8", "surrogateescape"))
            return
        for entry in entries:
            if depth and entry.is_dir(follow_symlinks=False):
                try:
                    add(entry.path, entry.stat(follow_symlinks=False))
                except OSError:
                    continue
            elif entry.name.endswith(".py"):
                try:
                    add(entry.path, entry.stat())
                except OSError:
                    continue

    for path in (str(base), os.path.join(base, "models")):
        try:
            add(path, os.stat(path))
        except OSError:
            h.update(f"{path}\0missing\0".encode("utf-8", "surrogateescape"))
    scan(str(base), 0)
    scan(os.path.join(base, "models"), 1)
    for name in sorted(set(models)):
        if name and os.sep not in name and name not in (".", ".."):
            scan(os.path.join(base, "models", name), 0)
    return h.hexdigest()[:16]


# fields that never hold a node (identifiers, numbers, flags): walk() does not read them
_NO_NODE_FIELDS = frozenset(
    ("id", "attr", "name", "arg", "module", "level", "kind", "type_comment", "asname", "conversion",
     "is_async", "simple", "tag")
)  # fmt: skip
_WALK_FIELDS: dict[type, tuple[str, ...]] = {}


_LEAVES = (ast.expr_context, ast.operator, ast.cmpop, ast.boolop, ast.unaryop)


def copy_tree(node: ast.AST) -> ast.AST:
    """A deep copy of an AST, as ``copy.deepcopy`` makes it (every node's attributes, the positions too) at a
    fraction of its cost; the field-less context and operator nodes (``Load``, ``Add``, which the parser shares)
    are shared rather than copied (nothing mutates them), and constants' values are immutable."""
    typ = type(node)
    new = typ.__new__(typ)
    state = node.__dict__.copy()
    for name, value in state.items():
        if isinstance(value, ast.AST):
            if not isinstance(value, _LEAVES):
                state[name] = copy_tree(value)
        elif type(value) is list:
            state[name] = [
                copy_tree(v) if isinstance(v, ast.AST) and not isinstance(v, _LEAVES) else v for v in value
            ]
    new.__dict__.update(state)
    return new


def walk_pairs(node: ast.AST) -> list[tuple[ast.AST, ast.AST]]:
    """(child, parent) for every node under ``node``, children in exactly ``ast.walk`` order (so ``[node,
    *children]`` is ``list(ast.walk(node))`` and each parent's children come in ``iter_child_nodes`` order).
    The last answer is kept: helpers asking about the same function share one walk."""
    if _LAST_PAIRS and _LAST_PAIRS[0][0] is node:
        return _LAST_PAIRS[0][1]
    memo = _PAIRS_MEMO[-1] if _PAIRS_MEMO else None  # inside ``walk_memo``: every subtree's pairs listed once
    if memo is not None:
        hit = memo.get(id(node))
        if hit is not None and hit[0] is node:
            _LAST_PAIRS[:] = [hit]
            return hit[1]
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
    if memo is not None:
        if len(memo) >= _WALK_MEMO_MAX:
            memo.clear()
        memo[id(node)] = (node, out)
    return out


_LAST_PAIRS: list[tuple[ast.AST, list[tuple[ast.AST, ast.AST]]]] = []
_PAIRS_MEMO: list[dict[int, tuple[ast.AST, list[tuple[ast.AST, ast.AST]]]]] = []  # beside ``_WALK_MEMO``


def _walk_fields(typ: type) -> tuple[str, ...]:
    fields = _WALK_FIELDS[typ] = tuple(
        f
        for f in typ._fields  # type: ignore[attr-defined]
        if f not in _NO_NODE_FIELDS and not (typ is ast.Constant and f == "value")
    )
    return fields


_WALK_MEMO: list[dict[int, tuple[ast.AST, list[ast.AST]]]] = []  # the innermost ``walk_memo`` scope's
_WALK_MEMO_MAX = 20_000  # subtrees remembered per scope (then it starts again): bounded
_SCOPED: list[dict[str, dict[Any, Any]]] = []  # the innermost scope's named memos (``scoped_memo``)


@contextlib.contextmanager
def walk_memo() -> Iterator[None]:
    """Within this scope ``walk`` remembers the subtrees it listed (by node identity, holding the node, so an
    identity cannot be reused meanwhile): the rules of one file walk the same functions and statements many
    times (44k calls over 6k distinct subtrees on veomni/models). The engine opens it around one file's
    rules (and around each project rule), whose trees nobody modifies; it is dropped when the scope ends,
    with every ``scoped_memo`` of the scope: no memo outlives the file it describes."""
    _WALK_MEMO.append({})
    _PAIRS_MEMO.append({})
    _SCOPED.append({})
    try:
        yield
    finally:
        _WALK_MEMO.pop()
        _PAIRS_MEMO.pop()
        _SCOPED.pop()
        _LAST_PAIRS.clear()


def scoped_memo(name: str) -> dict[Any, Any]:
    """The memo called ``name`` of the innermost ``walk_memo`` scope: the one place the rules' helpers keep
    what they computed about a file's nodes (keyed by node identity, holding the node), dropped with the
    scope. Outside a scope, a fresh dict each call: correct, only not remembered."""
    if not _SCOPED:
        return {}
    memos = _SCOPED[-1]
    memo = memos.get(name)
    if memo is None:
        memo = memos[name] = {}
    return memo


def walk(node: ast.AST) -> list[ast.AST]:
    """Every node of ``node``'s subtree, in exactly the order of ``ast.walk`` (breadth first, children in
    field order, contexts and operators included), as a list: several times faster than the generator.
    Inside ``walk_memo`` the list may be shared between calls: read it, never modify it."""
    if _WALK_MEMO:
        memo = _WALK_MEMO[-1]
        hit = memo.get(id(node))
        if hit is not None and hit[0] is node:
            return hit[1]
        out = _walk(node)
        if len(memo) >= _WALK_MEMO_MAX:
            memo.clear()
        memo[id(node)] = (node, out)
        return out
    return _walk(node)


def _walk(node: ast.AST) -> list[ast.AST]:
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


def nodes_of(tree: ast.AST, *types: type[ast.AST]) -> list[ast.AST]:
    """The nodes of ``tree``'s subtree whose type is one of ``types``, in ``walk`` order: what the rules'
    ``for n in walk(tree): if isinstance(n, T)`` loops read, without each of them testing every node. ``types``
    are concrete node classes as the parser makes them (``ast.Call``, ``ast.FunctionDef``; never an abstract
    ``ast.expr`` or ``ast.stmt``, whose nodes have other types). Inside ``walk_memo`` each answer is shared:
    read it, never modify it. A subtree of the scope's file (``index_file``) is answered from the file's one
    index (``FileIndex``) instead of a walk of its own; any other subtree is walked and indexed by type once."""
    memo = scoped_memo("astutil.nodes_of")
    key = (id(tree), types)
    hit = memo.get(key)
    if hit is not None and hit[0] is tree:
        return hit[1]
    found = None
    index = _file_index()
    if index is not None:
        found = index.nodes_of(tree, types)
    if found is None:
        found = _walked_nodes_of(tree, types, memo)
    memo[key] = (tree, found)
    return found


def _walked_nodes_of(tree: ast.AST, types: tuple[type[ast.AST], ...], memo: dict[Any, Any]) -> list[ast.AST]:
    """``nodes_of`` by a walk of ``tree``, indexed by type once per scope."""
    hit = memo.get(id(tree))
    if hit is None or hit[0] is not tree:
        index: dict[Any, list[ast.AST]] = {}
        for node in walk(tree):
            typ = type(node)
            found = index.get(typ)
            if found is None:
                index[typ] = [node]
            else:
                found.append(node)
        hit = memo[id(tree)] = (tree, index)
    index = hit[1]
    if len(types) == 1:
        return index.get(types[0], [])
    wanted = frozenset(types)
    return [n for n in walk(tree) if type(n) in wanted]


# node kinds the parser shares between places (one ``ast.Load()`` for every load, one ``ast.Add()``...): a rank
# per node cannot describe them, so the file index leaves them out and ``nodes_of`` walks for them
_SHARED_KINDS = (ast.expr_context, ast.operator, ast.boolop, ast.unaryop, ast.cmpop)


# the nodes ``nodes_of`` is asked about (functions, classes, the module, statements): the file index keeps a rank
# for these only; a question about another node (an expression) walks its subtree
_RANKED = (ast.stmt, ast.mod, ast.Lambda)
# per node type, the fields that can hold a node other than a shared one (contexts, operators) or a name
_INDEX_FIELDS: dict[type, tuple[str, ...]] = {}
_NOT_NODES = {ast.Global: ("names",), ast.Nonlocal: ("names",), ast.MatchClass: ("kwd_attrs",)}
_DEPTH_AT_MOST: dict[int, re.Pattern[bytes]] = {}  # d -> a byte <= d (``FileIndex.end``)


def _index_fields(typ: type) -> tuple[str, ...]:
    skip = ("ctx", "op", "ops", *_NOT_NODES.get(typ, ()))
    fields = _INDEX_FIELDS[typ] = tuple(f for f in _walk_fields(typ) if f not in skip)
    return fields


class FileIndex:
    """One file's tree listed once in pre-order (children in ``walk``'s field order), with each node's depth
    and per node type the ranks (pre-order positions) of its nodes; the engine's walk iterates it. A subtree
    is the ranks from its root to its end (the next node no deeper than the root); the nodes of a type in it are
    a slice of that type's ranks, and sorted by (depth, rank) they are in ``walk`` (breadth-first) order,
    because breadth-first order within one depth is pre-order. Shared nodes (contexts, operators) are left out."""

    __slots__ = ("root", "nodes", "depth", "by_type", "_rank", "_ends", "_depths")

    def __init__(self, root: ast.AST) -> None:
        self.root = root
        nodes: list[ast.AST] = []
        depth: list[int] = []
        by_type: dict[type, list[int]] = {}
        fields_of = _INDEX_FIELDS
        stack: list[ast.AST] = [root]
        depths = [0]
        pop, dpop, extend = stack.pop, depths.pop, stack.extend
        add_node, add_depth = nodes.append, depth.append
        i = 0
        while stack:
            node = pop()
            d = dpop()
            add_node(node)
            add_depth(d)
            typ = type(node)
            ranks = by_type.get(typ)
            if ranks is None:
                by_type[typ] = [i]
            else:
                ranks.append(i)
            i += 1
            children: list[ast.AST] = []
            fields = fields_of.get(typ)
            if fields is None:  # not `or`: a leaf kind's fields are ()
                fields = _index_fields(typ)
            for name in fields:
                value = getattr(node, name, None)
                if value is None:
                    continue
                if type(value) is list:
                    if value:
                        children += [v for v in value if v is not None] if None in value else value
                elif isinstance(value, ast.AST):
                    children.append(value)
            if children:
                children.reverse()
                extend(children)
                depths += [d + 1] * len(children)
        self.nodes, self.depth, self.by_type = nodes, depth, by_type
        self._rank: dict[int, int] | None = None
        self._ends: dict[int, int] = {}
        self._depths: bytes | None = None

    def rank(self, node: ast.AST) -> int | None:
        """``node``'s rank when it is a statement, a lambda or the module of this file, else None."""
        if self._rank is None:
            rank: dict[int, int] = {}
            nodes = self.nodes
            for typ, ranks in self.by_type.items():
                if issubclass(typ, _RANKED):
                    rank.update(zip([id(nodes[k]) for k in ranks], ranks))
            self._rank = rank
        i = self._rank.get(id(node))
        return i if i is not None and self.nodes[i] is node else None

    def end(self, i: int) -> int:
        """The rank after the subtree of the node at rank ``i``."""
        found = self._ends.get(i)
        if found is not None:
            return found
        depth = self.depth
        d = depth[i]
        if self._depths is None:
            self._depths = bytes(depth) if max(depth) < 256 else b""
        if self._depths:
            pattern = _DEPTH_AT_MOST.get(d)
            if pattern is None:
                pattern = _DEPTH_AT_MOST[d] = re.compile(b"[\\x00-" + re.escape(bytes([d])) + b"]")
            m = pattern.search(self._depths, i + 1)
            found = m.start() if m else len(depth)
        else:
            found = next((j for j in range(i + 1, len(depth)) if depth[j] <= d), len(depth))
        self._ends[i] = found
        return found

    def nodes_of(self, tree: ast.AST, types: tuple[type[ast.AST], ...]) -> list[ast.AST] | None:
        """``nodes_of(tree, *types)`` for a statement, lambda or the module of this file (None for another
        node, or a shared kind asked for)."""
        i = self.rank(tree)
        if i is None:
            return None
        lo, hi = i, self.end(i)
        picked: list[int] = []
        for typ in types:
            if issubclass(typ, _SHARED_KINDS):
                return None
            ranks = self.by_type.get(typ)
            if ranks:
                picked.extend(ranks[bisect.bisect_left(ranks, lo) : bisect.bisect_left(ranks, hi)])
        if len(types) > 1:
            picked.sort()
        picked.sort(key=self.depth.__getitem__)  # stable: pre-order within one depth, i.e. walk order
        nodes = self.nodes
        return [nodes[k] for k in picked]


def index_file(tree: ast.AST, index: FileIndex | None = None) -> None:
    """Name ``tree`` the file of the innermost ``walk_memo`` scope: its one index (``file_index``) is built at
    the first question, the engine's walk and ``nodes_of`` on any of its subtrees read it (the engine calls this
    per linted file); ``index``, when given, is ``tree``'s already built (an editor document's, spliced)."""
    if _SCOPED:
        slot: dict[str, object] = {"tree": tree}
        if index is not None and index.root is tree:
            slot["index"] = index
        _SCOPED[-1]["astutil.file"] = slot


def splice_index(old: FileIndex, root: ast.Module, k0: int, k1: int, new: list[ast.stmt]) -> FileIndex:
    """The index of ``root``, a module whose body is ``old.root``'s with its statements ``k0..k1`` (none when
    ``k1 < k0``: inserted before ``k0``) replaced by ``new``: the old listing's slices around them, the new
    statements indexed alone, the ranks after them shifted. ``FileIndex(root)`` gives the same (tests/test_reparse.py)."""
    body = old.root.body  # type: ignore[attr-defined]
    if getattr(old.root, "type_ignores", None) or getattr(root, "type_ignores", None):
        return FileIndex(root)
    size = len(old.nodes)
    tops: list[int] = []
    i = 1
    for _stmt in body:  # each top-level statement's rank: the subtrees follow one another
        tops.append(i)
        i = old.end(i)
    start = tops[k0] if k0 < len(tops) else size
    stop = tops[k1 + 1] if k1 + 1 < len(tops) else size
    sub = FileIndex(ast.Module(body=new, type_ignores=[]))
    added = len(sub.nodes) - 1
    delta = added - (stop - start)
    index = object.__new__(FileIndex)
    index.root = root
    index.nodes = [root, *old.nodes[1:start], *sub.nodes[1:], *old.nodes[stop:]]
    index.depth = [*old.depth[:start], *sub.depth[1:], *old.depth[stop:]]
    by_type: dict[type, list[int]] = {}
    shift = start - 1
    for typ in {*old.by_type, *sub.by_type}:
        ranks = old.by_type.get(typ, [])
        lo = bisect.bisect_left(ranks, start)
        hi = bisect.bisect_left(ranks, stop)
        added_ranks = [r + shift for r in sub.by_type.get(typ, ()) if r]
        merged = [*ranks[:lo], *added_ranks, *([r + delta for r in ranks[hi:]] if delta else ranks[hi:])]
        if merged:
            by_type[typ] = merged
    index.by_type = by_type
    index._rank = None
    index._ends = {}
    index._depths = None
    return index


def file_index(tree: ast.AST) -> FileIndex:
    """The index of ``tree``: the scope's (``index_file``), built once, when ``tree`` is the scope's file; else
    a fresh one."""
    slot = _SCOPED[-1].get("astutil.file") if _SCOPED else None
    if slot is None or slot["tree"] is not tree:
        return FileIndex(tree)
    index = slot.get("index")
    if index is None:
        index = slot["index"] = FileIndex(tree)
    return index


def file_index_of(node: ast.AST) -> FileIndex | None:
    """The scope's file index (``index_file``) when ``node`` is a statement, lambda or the module of that file
    (``FileIndex.rank`` answers for it), else None: a node of another tree is walked by its caller."""
    index = _file_index()
    return index if index is not None and index.rank(node) is not None else None


def _file_index() -> FileIndex | None:
    if not _SCOPED:
        return None
    slot = _SCOPED[-1].get("astutil.file")
    if slot is None:
        return None
    index = slot.get("index")
    if index is None:
        index = slot["index"] = FileIndex(slot["tree"])
    return index


_NESTED_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def own_nodes(func: ast.AST) -> list[ast.AST]:
    """The nodes of ``func``'s subtree outside the functions, lambdas and classes nested in it (``func`` itself
    excluded), depth first with each node's children taken last first (the order of a stack seeded with
    ``ast.iter_child_nodes``). Inside ``walk_memo`` the list is shared: read it, never modify it."""
    memo = scoped_memo("astutil.own_nodes")
    hit = memo.get(id(func))
    if hit is not None and hit[0] is func:
        return hit[1]
    out: list[ast.AST] = []
    stack = _children(func)
    nested = _NESTED_SCOPES
    while stack:
        node = stack.pop()
        if isinstance(node, nested):
            continue
        out.append(node)
        stack.extend(_children(node))
    memo[id(func)] = (func, out)
    return out


def child_nodes(node: ast.AST) -> list[ast.AST]:
    """``list(ast.iter_child_nodes(node))``, same nodes in the same order, without the generators."""
    return _children(node)


def _children(node: ast.AST) -> list[ast.AST]:
    """``list(ast.iter_child_nodes(node))`` over the fields that can hold a node."""
    out: list[ast.AST] = []
    typ = type(node)
    fields = _WALK_FIELDS.get(typ)
    if fields is None:
        fields = _walk_fields(typ)
    AST = ast.AST
    for name in fields:
        value = getattr(node, name, None)
        if isinstance(value, AST):
            out.append(value)
        elif type(value) is list:
            out.extend([item for item in value if isinstance(item, AST)])
    return out


_STATEMENT_LISTS = ("body", "orelse", "finalbody", "handlers", "cases")


def following_statements(parent: ast.AST | None, node: ast.AST) -> list[ast.stmt]:
    """The statements after ``node`` in the block of ``parent`` that holds it (body, else or finally), or []."""
    for field in ("body", "orelse", "finalbody"):
        stmts = getattr(parent, field, None)
        if isinstance(stmts, list) and node in stmts:
            return stmts[stmts.index(node) + 1 :]
    return []


def statements(node: ast.AST) -> list[ast.stmt]:
    """Every statement of ``node``'s subtree (``node`` itself included when it is one), found by following
    statement lists only (bodies, ``else`` / ``finally`` blocks, handlers, match cases): a tenth of the nodes
    ``walk`` lists. Order: depth first, each list's statements in reverse; callers needing an order sort."""
    out: list[ast.stmt] = []
    stack = [node]
    stmt = ast.stmt
    while stack:
        sub = stack.pop()
        if isinstance(sub, stmt):
            out.append(sub)
        for name in _STATEMENT_LISTS:
            value = getattr(sub, name, None)
            if type(value) is list:
                stack.extend(value)
    return out


def module_package(path: str) -> list[str]:
    """The dotted package of a file (``veomni.models_kernel.transformers.toy``), for relative imports; [] when
    unknown. On disk the package is read from the ``__init__.py`` chain; for a path that is not on disk (an
    editor buffer, an example) from the last ``veomni`` component of the path. Remembered in the
    ``walk_memo`` scope (a file's rules resolve many relative names of the same file)."""
    memo = scoped_memo("astutil.module_package")
    known = memo.get(path)
    if known is None:
        known = memo[path] = tuple(_module_package(path))
    return list(known)


def _module_package(path: str) -> list[str]:
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


def absolute_module(current: str, is_package: bool, level: int, target: str | None) -> str | None:
    """The absolute module of ``from <level dots><target> import ...`` written in module ``current`` (a package
    when ``is_package``); None when the dots climb above the top. The one relative-import resolver."""
    if level == 0:
        return target
    parts = current.split(".") if current else []
    if not is_package:
        parts = parts[:-1]
    if level - 1 > len(parts) or (level - 1 == len(parts) and not target):
        return None
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    if target:
        parts = [*parts, *target.split(".")]
    return ".".join(parts) if parts else None


def resolve_relative(path: str, module: str) -> str:
    """``....ops.kernels.x`` -> ``veomni.ops.kernels.x`` given the file's path (unchanged if not relative or
    unresolvable): :func:`absolute_module` with the file's package (:func:`module_package`)."""
    if not module.startswith("."):
        return module
    level = len(module) - len(module.lstrip("."))
    package = module_package(path)
    if not package:
        return module
    return absolute_module(".".join(package), True, level, module[level:] or None) or module


# -- call arguments and literals (the one copy; rules, fixers and the VeOmni model use these) ---------------


def last_name(node: ast.AST) -> str | None:
    """The name a name or attribute spells last (``x`` -> ``x``, ``torch.nn.Linear`` -> ``Linear``), else None."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def call_name(call: ast.Call) -> str:
    """The last name of what ``call`` calls (`dist.broadcast(...)` -> `broadcast`, `f(...)` -> `f`), or ""."""
    return last_name(call.func) or ""


def keyword_arg(call: ast.Call, name: str) -> ast.expr | None:
    """The value of keyword ``name`` of ``call``, or None."""
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    return None


def call_arg(call: ast.Call, index: int, keyword: str) -> ast.expr | None:
    """An argument given by keyword, or at position ``index`` (when no starred argument comes first)."""
    found = keyword_arg(call, keyword)
    if found is not None:
        return found
    if len(call.args) > index and not any(isinstance(a, ast.Starred) for a in call.args[: index + 1]):
        return call.args[index]
    return None


def none_tested(test: ast.AST) -> str | None:
    """The name an ``<name> is None`` comparison tests (``x is None`` -> ``x``), else None."""
    if (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Is)
        and isinstance(test.left, ast.Name)
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value is None
    ):
        return test.left.id
    return None


def int_value(node: ast.AST | None) -> int | None:
    """The value of an integer literal, negated ones included (``3``, ``-100``); None for anything else (bools too)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = node.operand
        return -inner.value if isinstance(inner, ast.Constant) and type(inner.value) is int else None
    return node.value if isinstance(node, ast.Constant) and type(node.value) is int else None


def str_value(node: ast.AST | None) -> str | None:
    """The value of a string literal (also ``"a" + "b"`` of literals); None for anything else (f-strings)."""
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = str_value(node.left), str_value(node.right)
        return left + right if left is not None and right is not None else None
    return None


# -- the import table -------------------------------------------------------------------------------------


def import_bindings(stmt: ast.Import | ast.ImportFrom, module: str | None = None) -> list[tuple[str, str]]:
    """(bound name, dotted target) of one import statement: ``import a.b`` binds ``a`` -> ``a``, ``import a.b as
    c`` binds ``c`` -> ``a.b``, ``from m import x as y`` binds ``y`` -> ``m.x``. ``module`` replaces the
    statement's own module text (a resolved relative import); by default relative modules keep their dots."""
    out: list[tuple[str, str]] = []
    if isinstance(stmt, ast.Import):
        for alias in stmt.names:
            if alias.asname:
                out.append((alias.asname, alias.name))
            else:
                root = alias.name.split(".")[0]
                out.append((root, root))
        return out
    if module is None:
        module = "." * stmt.level + (stmt.module or "")
    for alias in stmt.names:
        if alias.name != "*":
            out.append((alias.asname or alias.name, f"{module}.{alias.name}"))
    return out


# -- snippets --------------------------------------------------------------------------------------------------

_SNIPPETS: Bounded[str, ast.Module | None] = Bounded(512)
_SNIPPET_MAX = 1 << 15  # characters: a longer text is parsed, not remembered (a whole file has its own store)


def assigned_name(scope: ast.AST, value: ast.AST) -> str | None:
    """The name ``value`` is bound to by a plain ``name = value`` somewhere in ``scope``, or None (tuple
    targets, attributes, several targets and annotated assignments do not count)."""
    for n in nodes_of(scope, ast.Assign):
        if n.value is value and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):  # type: ignore[attr-defined]
            return n.targets[0].id  # type: ignore[attr-defined]
    return None


def parse_snippet(text: str) -> ast.Module | None:
    """``ast.parse(text)``, None when it does not parse, remembered by the text itself: the code strings that
    several rules read (a spec's post-import block, a replacement renamed by a ``name_map``) are parsed once per
    run. The tree is shared by every caller asking for the same characters: read it, never change it (a caller
    that shifts line numbers or edits nodes parses its own copy). Whole files go through the run's store of parsed
    files (``veomni.patchgen.load_file``), not through here."""
    hit = _SNIPPETS.get(text, _MISSING)  # type: ignore[arg-type]
    if hit is not _MISSING:
        return hit
    try:
        tree: ast.Module | None = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        tree = None
    if len(text) <= _SNIPPET_MAX:
        _SNIPPETS[text] = tree
    return tree


_MISSING: Any = object()
