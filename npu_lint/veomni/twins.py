"""Twin statements: code written in pairs for two roles of one computation (the query and the key, cos and sin,
the image and the video stream, the gate and the up projection, the height and the width, input and output
splits), the second statement of a pair made by copying the first and swapping its role words. The first is the
reference for the second: a statement that is its twin with every role word swapped but one, where the
unswapped word is the other side's and that side's counterpart exists in the function, reads the wrong role's
value (``k_embed = npu_rotary_mul(q, cos, sin).to(k.dtype)`` beside ``q_embed = npu_rotary_mul(q, ...)``).

Statements are compared as token sequences of their source (identifiers, operators, literals): equal length, every
position equal, or the twin's word swapped, or (the leftover) the twin's word kept. Read statically; nothing is
imported."""

from __future__ import annotations

import ast
import bisect
import re

from npu_lint.core.astutil import FileIndex, file_index_of, nodes_of, own_nodes, walk

# the role pairs, each word matched as a whole ``_``-separated part of an identifier
PAIRS: tuple[tuple[str, str], ...] = (
    ("q", "k"),
    ("query", "key"),
    ("cos", "sin"),
    ("image", "video"),
    ("images", "videos"),
    ("gate", "up"),
    ("height", "width"),
    ("input", "output"),
    ("src", "dst"),
    ("row", "col"),
    ("pos", "neg"),
    ("chosen", "rejected"),
    ("scatter", "gather"),
)
_OTHER = {a: b for a, b in PAIRS} | {b: a for a, b in PAIRS}
_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+(?:\.\d*)?|\S")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_STATEMENTS = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Return)
MAX_TOKENS = 80


def _parts(ident: str) -> list[str]:
    return ident.split("_")


def swap_word(ident: str, pair: tuple[str, str]) -> str:
    """``ident`` with each part that is one word of ``pair`` replaced by the other (``q_embed`` -> ``k_embed``)."""
    a, b = pair
    parts = _parts(ident)
    return "_".join(b if p == a else a if p == b else p for p in parts)


def _side(ident: str, pair: tuple[str, str]) -> str | None:
    parts = _parts(ident)
    has_a, has_b = pair[0] in parts, pair[1] in parts
    if has_a == has_b:
        return None
    return pair[0] if has_a else pair[1]


def _target_idents(stmt: ast.stmt) -> list[str]:
    """The names and attributes an assignment's targets spell (``ast.walk`` order); none for other statements."""
    targets: list[ast.expr] = []
    if isinstance(stmt, ast.Assign):
        targets = stmt.targets
    elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
        targets = [stmt.target]
    return [
        n.id if isinstance(n, ast.Name) else n.attr
        for t in targets
        for n in walk(t)
        if isinstance(n, (ast.Name, ast.Attribute))
    ]


def _statement_side(
    stmt: ast.stmt, tokens: list[str], pair: tuple[str, str], idents: list[str] | None = None
) -> str | None:
    """The role a statement is written for: its assignment target's, else the majority of its role words.
    ``idents``: the statement's ``_target_idents`` when the caller has them."""
    if idents is None:
        idents = _target_idents(stmt)
    sides = {s for i in idents for s in [_side(i, pair)] if s}
    if len(sides) == 1:
        return sides.pop()
    if sides:
        return None
    counts = {pair[0]: 0, pair[1]: 0}
    for tok in tokens:
        side = _side(tok, pair)
        if side:
            counts[side] += 1
    if counts[pair[0]] == counts[pair[1]]:
        return None
    return pair[0] if counts[pair[0]] > counts[pair[1]] else pair[1]


_IDENT_FIELDS = frozenset({"id", "attr", "arg"})
# the fields of Python's grammar (3.9-3.13) that can hold a string, bytes or a list of strings (identifiers, type
# comments, a constant's value and kind, ``global`` names, a match pattern's names): the other fields hold nodes,
# lists of nodes, numbers or None, so ``_may_have_role_word`` reads only these (per node type, once)
_TEXT_NAMES = frozenset(
    {
        "id",
        "attr",
        "arg",
        "name",
        "asname",
        "module",
        "names",
        "rest",
        "kwd_attrs",
        "type_comment",
        "kind",
        "value",
        "tag",
    }
)
_TEXT_FIELDS: dict[type, tuple[str, ...]] = {}


def _own_statements(func: ast.AST) -> tuple[list[ast.stmt], list[list[ast.AST]]] | None:
    """The ``_STATEMENTS`` of ``own_nodes(func)`` in its order, each with its subtree's nodes (contexts and
    operators left out), read from the file's index (``FileIndex``) when ``func`` is in the scope's file, else None.
    ``own_nodes`` takes a node's children last first, so of two statements (simple ones: neither holds the other)
    the one whose subtree ends later in pre-order comes first."""
    index = file_index_of(func)
    if index is None:
        return None
    picked = [(index.end(r), r) for r in _own_ranks(index, func, _STATEMENTS)]
    picked.sort(reverse=True)
    nodes = index.nodes
    return [nodes[r] for _e, r in picked], [nodes[r:e] for e, r in picked]  # type: ignore[misc]


def _own_ranks(index: FileIndex, func: ast.AST, types: tuple[type[ast.AST], ...]) -> list[int]:
    """The ranks (pre-order) of the nodes of ``types`` in ``func``'s subtree outside its nested scopes (the nodes
    ``own_nodes(func)`` lists), ascending; ``func`` is ranked in ``index``."""
    i = index.rank(func)
    assert i is not None
    lo, hi = i + 1, index.end(i)
    nested: list[tuple[int, int]] = []  # the nested scopes' rank ranges (decorators and defaults included)
    for typ in _NESTED:
        ranks = index.by_type.get(typ)
        if ranks:
            for r in ranks[bisect.bisect_left(ranks, lo) : bisect.bisect_left(ranks, hi)]:
                nested.append((r, index.end(r)))
    out: list[int] = []
    for typ in types:
        ranks = index.by_type.get(typ)
        if ranks:
            out.extend(
                r
                for r in ranks[bisect.bisect_left(ranks, lo) : bisect.bisect_left(ranks, hi)]
                if not any(a <= r < b for a, b in nested)
            )
    if len(types) > 1:
        out.sort()
    return out


_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def _may_have_role_word(stmt: ast.stmt, subtree: list[ast.AST] | None = None) -> bool:
    """False only when no identifier token of ``ast.unparse(stmt)`` can have a role word as a part (so the
    statement is not unparsed): its identifiers are its names, attributes, keywords and parameters, spelled
    as they are (ASCII ones: split on ``_`` as the tokens are), its syntax words (none a role word), numbers
    (none), and its string constants' text (any role word in it, or any character ``repr`` escapes, keeps it).
    ``subtree``: the statement's nodes when the caller has them (in any order; contexts and operators, which
    spell nothing, may be left out)."""
    for node in walk(stmt) if subtree is None else subtree:
        fields = _TEXT_FIELDS.get(type(node))
        if fields is None:
            fields = _TEXT_FIELDS[type(node)] = tuple(f for f in type(node)._fields if f in _TEXT_NAMES)
        for name in fields:
            value = getattr(node, name, None)
            if isinstance(value, str):
                if name in _IDENT_FIELDS:  # an identifier, one token as it is
                    if not value.isascii() or _OTHER.keys() & set(_parts(value)):
                        return True
                # any other text (a string constant, a type comment), as unparse quotes and escapes it
                elif not value.isascii() or not value.isprintable() or "\\" in value:
                    return True
                elif any(w in value for w in _OTHER):
                    return True
            elif isinstance(value, bytes):
                return True
            elif type(value) is list and any(  # ``global`` / ``nonlocal`` names
                isinstance(v, str) and (not v.isascii() or _OTHER.keys() & set(_parts(v))) for v in value
            ):
                return True
    return False


# metadata both roles share (a batch size read from the query, the dtype both casts restore)
_METADATA = frozenset({"size", "shape", "device", "dtype", "ndim", "numel", "dim"})


def _shared_read(tokens: list[str], i: int) -> bool:
    """Whether the word at ``i`` is read for what both roles share: its metadata (``q.size(0)``, ``k.dtype``),
    or a config field (``self.config.image_token_id``: a model constant another branch may reuse on purpose)."""
    if i + 2 < len(tokens) and tokens[i + 1] == "." and tokens[i + 2] in _METADATA:
        return True
    return i >= 2 and tokens[i - 1] == "." and tokens[i - 2] == "config"


def twin_leftovers(func: ast.AST, known: set[str] | None = None) -> list[tuple[ast.stmt, str, str]]:
    """``(statement, leftover, expected)``: a statement of ``func`` that is a twin of another statement of it
    with every role word swapped but one, the unswapped word the other role's (by the statement's target, or its
    majority of role words), and the expected word a name the function (or ``known``: the file's attribute
    names) has. ``q_len`` beside a key statement is a shared read when no ``k_len`` exists."""
    listed = _own_statements(func)
    if listed is None:
        stmts = [s for s in own_nodes(func) if isinstance(s, _STATEMENTS)]
        subtrees: list[list[ast.AST]] | None = None
    else:
        stmts, subtrees = listed
    if len(stmts) < 2:
        return []
    by_length: dict[int, list[tuple[ast.stmt, list[str]]]] = {}
    for k, s in enumerate(stmts):
        if not _may_have_role_word(s, None if subtrees is None else subtrees[k]):
            continue
        text = ast.unparse(s)
        if "\n" in text:
            continue
        tokens = _TOKEN.findall(text)
        if len(tokens) > MAX_TOKENS or not any(
            _OTHER.keys() & set(_parts(t)) for t in tokens if _IDENT.match(t)
        ):
            continue
        by_length.setdefault(len(tokens), []).append((s, tokens))
    out: list[tuple[ast.stmt, str, str]] = []
    groups = [group for group in by_length.values() if len(group) >= 2]
    if not groups:
        return out
    names = {n.id for n in nodes_of(func, ast.Name)} | {  # type: ignore[attr-defined]
        a.arg
        for a in nodes_of(func, ast.arg)  # type: ignore[attr-defined]
    }
    attrs = {n.attr for n in nodes_of(func, ast.Attribute)} | (known or set())  # type: ignore[attr-defined]
    for group in groups:
        for s, mine in group:
            found = _leftover(s, mine, group, names, attrs)
            if found is not None:
                out.append((s, *found))
    return out


def _leftover(
    s: ast.stmt,
    mine: list[str],
    group: list[tuple[ast.stmt, list[str]]],
    names: set[str],
    attrs: set[str],
) -> tuple[str, str] | None:
    idents = _target_idents(s)
    words = {p for t in mine for p in _parts(t)}
    for pair in PAIRS:
        if pair[0] not in words and pair[1] not in words:
            continue  # neither word in any token (the targets' names are tokens too): no side
        side = _statement_side(s, mine, pair, idents)
        if side is None:
            continue
        wrong = _OTHER[side]
        for t, theirs in group:
            if t is s:
                continue
            swapped = leftover = 0
            bad: tuple[str, str] | None = None
            for i, (a, b) in enumerate(zip(mine, theirs, strict=True)):
                if a == b:
                    mapped = swap_word(b, pair)
                    if mapped == b or not _IDENT.match(b):
                        continue
                    # the twin's role word kept: a leftover when it is the other role's and the expected
                    # counterpart exists, else a shared read (``q_len``)
                    attribute = i > 0 and mine[i - 1] == "."
                    if _shared_read(mine, i):
                        continue
                    if _side(a, pair) == wrong and (mapped in attrs if attribute else mapped in names):
                        leftover += 1
                        bad = bad or (a, mapped)
                        continue
                    if _side(a, pair) == wrong:
                        continue
                    break
                if swap_word(b, pair) == a:
                    swapped += 1
                    continue
                break
            else:
                if swapped and leftover == 1 and bad is not None:
                    return bad
    return None


# the pairs NPU727 reads (a twin bound and never read): the statement pairs above without preference pairs
# and collective directions, whose sides are often legitimately one-sided, and with start/end
UNREAD_PAIRS: tuple[tuple[str, str], ...] = (
    *(p for p in PAIRS if p not in {("chosen", "rejected"), ("scatter", "gather")}),
    ("start", "end"),
)
_SWAP = {a: b for a, b in UNREAD_PAIRS} | {b: a for a, b in UNREAD_PAIRS}


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
    for name, node in _own_bindings(func).items():
        bound.setdefault(name, node)
    candidates = {n: twins_of(n) for n in bound if not n.startswith("_")}
    candidates = {n: t for n, t in candidates.items() if any(x in bound for x, _ in t)}
    if not candidates:
        return []
    read = {n.id for n in nodes_of(func, ast.Name) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    out = []
    positional = [*args.posonlyargs, *args.args]
    optional = {p.arg for p in positional[len(positional) - len(args.defaults) :]} | {
        p.arg for p, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None
    }
    for name, twins in candidates.items():
        if name in read:
            continue
        for twin, word in twins:
            if twin in bound and twin in read and any(word in r.split("_") for r in read if r != twin):
                slip = _slip(func, twin, word)
                if (
                    slip is None
                    and name in optional
                    and bound[name] is not None
                    and name not in _stored(func)
                ):
                    break  # an optional parameter no statement of its side displaced: accepted and unused
                out.append((slip or bound[name], name, twin))
                break
    return out


def _own_bindings(func: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, ast.AST]:
    """The names ``func``'s own code binds by a plain assignment target (not an element of an unpacked tuple or
    list), each with its first binding in ``own_nodes`` order, in that order."""
    bound: dict[str, ast.AST] = {}
    unpacked: set[int] = set()
    index = file_index_of(func)
    if index is None:
        for node in own_nodes(func):
            if isinstance(node, (ast.Tuple, ast.List)) and isinstance(node.ctx, ast.Store):
                unpacked.update(id(e) for e in node.elts)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and id(node) not in unpacked:
                bound.setdefault(node.id, node)
    else:
        # the same from the file's index: a tuple comes before its elements in either order, and ``own_nodes``
        # lists the names (leaves) in reverse pre-order, so each name's first binding there is its last in
        # pre-order, and the names come in descending order of those
        nodes = index.nodes
        for r in _own_ranks(index, func, (ast.Tuple, ast.List)):
            node = nodes[r]
            if isinstance(node.ctx, ast.Store):  # type: ignore[attr-defined]
                unpacked.update(id(e) for e in node.elts)  # type: ignore[attr-defined]
        last: dict[str, int] = {}
        for r in _own_ranks(index, func, (ast.Name,)):
            node = nodes[r]
            if isinstance(node.ctx, ast.Store) and id(node) not in unpacked:  # type: ignore[attr-defined]
                last[node.id] = r  # type: ignore[attr-defined]
        for name, r in sorted(last.items(), key=lambda item: -item[1]):
            bound.setdefault(name, nodes[r])
    return bound


def _stored(func: ast.AST) -> set[str]:
    return {
        n.id for n in nodes_of(func, ast.Name) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }


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
