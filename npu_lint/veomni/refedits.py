"""Single edits of a reference statement: a function that copies statements of a reference (a spec's replacement
of the upstream method or function it replaces) and changes one of them in one place.

A replacement is a rewrite, so most of its statements are upstream's own (the eager body below a kernel guard,
the loss head around the kernel call, the rotary cast around a fused kernel) and the rest are new. A statement
that is upstream's with exactly one small change (an operator, a number, a comparison, an operand, an argument,
an fp32 upcast, a dtype, a reduction, or a name read in place of another name the reference also reads) is
rarely a deliberate rewrite: deliberate rewrites call something else, add arguments or restructure. This module
aligns the two bodies statement by statement (equivalent spellings made alike) and names each such edit.
"""

from __future__ import annotations

import ast
import difflib
import re
from collections.abc import Iterator

from npu_lint.core.astutil import copy_tree, nodes_of, scoped_memo, walk
from npu_lint.veomni.losspath import _Canon, _code, _sequence_like

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_DTYPES = frozenset({"float32", "float", "bfloat16", "float16", "half", "double", "float64"})
_REDUCERS = frozenset({"mean", "sum", "max", "min", "amax", "amin", "prod", "logsumexp", "nansum", "nanmean"})
_UPCASTS = frozenset({"float", "double"})
_OPERATORS = (ast.operator, ast.cmpop, ast.boolop, ast.unaryop)
_OPS = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
    ast.MatMult: "@",
    ast.BitAnd: "&",
    ast.BitOr: "|",
}


def _canon(node: ast.AST) -> ast.AST:
    if isinstance(node, ast.expr):
        return _Canon().visit(ast.Expression(copy_tree(node))).body  # type: ignore[no-any-return]
    return _Canon().visit(copy_tree(node))  # type: ignore[no-any-return]


# ``_key`` of a node, memoised by identity (the node is held, so its id is not reused while its entry lives): one
# alignment asks for the same statement's key once per candidate pairing, and NPU458 and NPU468 align the same
# upstream bodies file after file. Bounded; the trees are never mutated (``_canon`` works on a copy).
_KEYS: dict[int, tuple[ast.AST, str | None, ast.AST]] = {}
_KEYS_MAX = 8192


def _key(node: ast.AST) -> str:
    return _keyed(node)[0]


def _keyed(node: ast.AST) -> tuple[str, ast.AST]:
    """``node``'s key and the canonical form it dumps (only read, never modified), memoised as ``_key``. A
    compound statement's canonical form holds its inner statements' (``_Canon`` rewrites each node from its own
    subtree alone and keeps every statement list's length), so they are remembered with it and dumped when asked:
    the alignment of the bodies inside asks for them next."""
    hit = _KEYS.get(id(node))
    if hit is not None and hit[0] is node:
        key = hit[1]
        if key is None:  # an inner statement of a compound one keyed before: its canonical form is at hand
            key = ast.dump(hit[2])
            _KEYS[id(node)] = (node, key, hit[2])
        return key, hit[2]
    canonical = _canon(node)
    key = ast.dump(canonical)
    if len(_KEYS) >= _KEYS_MAX:
        _KEYS.clear()
    _KEYS[id(node)] = (node, key, canonical)
    if isinstance(node, ast.stmt) and _STATEMENT_LISTS.intersection(node._fields):
        _keep_inner(node, canonical)
    return key, canonical


_STATEMENT_LISTS = frozenset({"body", "orelse", "finalbody", "handlers", "cases"})


def _keep_inner(node: ast.AST, canonical: ast.AST) -> None:
    """Remember, unkeyed, the canonical form of each statement inside ``node`` (its counterpart in ``canonical``,
    node for node through the statement lists, exception handlers and match cases)."""
    stack = [(node, canonical)]
    while stack:
        orig, canon = stack.pop()
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            mine, theirs = getattr(orig, field, None), getattr(canon, field, None)
            if type(mine) is not list or type(theirs) is not list or len(mine) != len(theirs):
                continue
            for a, b in zip(mine, theirs):
                if type(a) is not type(b) and not isinstance(
                    b, ast.Assign
                ):  # `x: T = v`, `x += v`: an `Assign`
                    continue
                if isinstance(a, ast.stmt) and id(a) not in _KEYS:
                    if len(_KEYS) >= _KEYS_MAX:
                        return
                    _KEYS[id(a)] = (a, None, b)
                stack.append((a, b))


def _pairings(
    up: list[ast.stmt], c: ast.stmt, reads: set[str], bound: frozenset[str] | None
) -> dict[int, list[tuple[ast.AST, str]]]:
    """What ``_pair(u, c)`` yields, by the index of ``u`` in ``up``, for the statements ``u`` it yields something
    for. When there are none, which statement of ``up`` is closest to ``c`` (``_closest``, its ``difflib``
    ratios: the costly part) does not matter. ``_pair`` yields nothing for a statement of another type or a
    definition; a simple statement yields ``statement_edit(u, c)``, computed here on the memoised canonical
    forms."""
    out: dict[int, list[tuple[ast.AST, str]]] = {}
    if isinstance(c, _FUNCS):
        return out
    compound = isinstance(getattr(c, "body", None), list)
    mine = None if compound else _keyed(c)[1]
    for i, u in enumerate(up):
        if type(u) is not type(c):
            continue
        if mine is None:
            found = list(_pair(u, c, reads, bound))
        else:
            edit = _canonical_edit(_keyed(u)[1], mine, reads, bound)
            found = [(c, edit[2])] if edit is not None else []
        if found:
            out[i] = found
    return out


def _closest(up: list[ast.stmt], c: ast.stmt) -> ast.stmt:
    """The first statement of ``up`` whose key is most like ``c``'s (``difflib`` ratio, as ``max`` picks it): one
    matcher holds ``c``'s key, a candidate whose cheap upper bounds cannot beat the best so far is skipped, and a
    ratio is remembered by the two keys (specs of one family repeat their replacements)."""
    if len(up) == 1:
        return up[0]
    kc = _key(c)
    matcher = difflib.SequenceMatcher(None, "", kc)
    # each candidate's ratio, or an upper bound of it (``quick_ratio``: the characters both keys hold) when not
    # known yet; candidates are then settled most promising first, so the best is found early and the others'
    # bounds rule them out without their (costly) ratio. The answer is the one a scan in order would give: the
    # highest ratio, the first of equals.
    bounds: list[tuple[float, int, bool]] = []  # (ratio or its bound, index, exact)
    for i, u in enumerate(up):
        ku = _key(u)
        r = _RATIOS.get((ku, kc))
        if r is not None:
            bounds.append((r, i, True))
            continue
        matcher.set_seq1(ku)
        bounds.append((min(matcher.real_quick_ratio(), matcher.quick_ratio()), i, False))
    bounds.sort(key=lambda b: (-b[0], b[1]))
    best_index, best_ratio = 0, -1.0
    for bound, i, exact in bounds:
        if bound < best_ratio or (bound == best_ratio and i > best_index):
            break  # this one and every later one (bounds no higher) cannot be the first best
        if exact:
            r = bound
        else:
            ku = _key(up[i])
            matcher.set_seq1(ku)
            r = matcher.ratio()
            if len(_RATIOS) >= _KEYS_MAX:
                _RATIOS.clear()
            _RATIOS[(ku, kc)] = r
        if r > best_ratio or (r == best_ratio and i < best_index):
            best_index, best_ratio = i, r
    return up[best_index]


_RATIOS: dict[tuple[str, str], float] = {}


def _diffs(a: object, b: object, out: list[tuple[object, object]], limit: int = 3) -> None:
    """The outermost differing node pairs of ``a`` and ``b`` (positions ignored); a list whose length differs,
    or whose items are the other's reordered, is one difference at its owner (the caller records it)."""
    if len(out) > limit:
        return
    if isinstance(a, ast.Call | ast.BinOp) and isinstance(b, ast.expr) and _wraps(a, b):
        out.append((a, b))  # an upcast or an operand around the other dropped
        return
    if type(a) is not type(b):
        out.append((a, b))
        return
    if isinstance(a, ast.BinOp | ast.BoolOp | ast.UnaryOp) and type(a.op) is not type(b.op):  # type: ignore[attr-defined]
        out.append((a, b))  # an operator changed: the difference is its expression's
        return
    if isinstance(a, ast.BinOp) and isinstance(a.op, ast.Add | ast.Mult):
        # the canonical form orders a commutative operation's operands by their text, so an edit inside one
        # operand may move it to the other side: compare both pairings and keep the closer
        straight: list[tuple[object, object]] = []
        crossed: list[tuple[object, object]] = []
        _diffs(a.left, b.left, straight, limit)  # type: ignore[attr-defined]
        _diffs(a.right, b.right, straight, limit)  # type: ignore[attr-defined]
        _diffs(a.left, b.right, crossed, limit)  # type: ignore[attr-defined]
        _diffs(a.right, b.left, crossed, limit)  # type: ignore[attr-defined]
        out.extend(straight if len(straight) <= len(crossed) else crossed)
        return
    if isinstance(a, ast.AST):
        for name in a._fields:
            x, y = getattr(a, name, None), getattr(b, name, None)
            if isinstance(x, list):
                if len(x) != len(y) or _permuted(x, y):  # type: ignore[arg-type]
                    out.append((a, b))
                    continue
                for i, j in zip(x, y, strict=True):  # type: ignore[call-overload]
                    if isinstance(i, _OPERATORS) and type(i) is not type(j):
                        out.append((a, b))  # an operator changed: the difference is its expression's
                        break
                    _diffs(i, j, out, limit)
            elif isinstance(x, _OPERATORS) and type(x) is not type(y):
                out.append((a, b))
            elif isinstance(x, ast.AST) or isinstance(y, ast.AST):
                _diffs(x, y, out, limit)
            elif x != y and repr(x) != repr(y):
                out.append((a, b))
        return
    if a != b and repr(a) != repr(b):
        out.append((a, b))


def _wraps(a: ast.Call | ast.BinOp, b: ast.expr) -> bool:
    if isinstance(a, ast.BinOp):
        return isinstance(b, ast.BinOp) and _dump(b) in (_dump(a.left), _dump(a.right))
    return _upcast_of(a, b) and isinstance(b, ast.Call)


def _permuted(x: list, y: list) -> bool:  # type: ignore[type-arg]
    if len(x) < 2 or not all(isinstance(i, ast.AST) for i in (*x, *y)):
        return False
    kx, ky = [ast.dump(i) for i in x], [ast.dump(i) for i in y]
    return kx != ky and sorted(kx) == sorted(ky)


def _dump(node: object) -> str:
    return ast.dump(node) if isinstance(node, ast.AST) else repr(node)


def _dumps(nodes: list[ast.expr]) -> list[str]:
    return [ast.dump(n) for n in nodes]


def _short(node: object) -> str:
    text = " ".join(ast.unparse(node).split()) if isinstance(node, ast.AST) else repr(node)
    return text if len(text) <= 60 else text[:57] + "..."


def _leaf(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _upcast_of(call: object, inner: object) -> bool:
    """``call`` is ``inner.float()`` (``.to(torch.float32)`` is made ``.float()`` by the canonical form)."""
    return (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and call.func.attr in _UPCASTS
        and not call.args
        and _dump(call.func.value) == _dump(inner)
    )


def classify(up: object, cp: object, reads: set[str], bound: frozenset[str] | None = None) -> str | None:
    """What one edit turned ``up`` into ``cp``, or None when it is not a small edit of a kind that changes what
    the statement computes (``reads``: the identifiers the reference function reads)."""
    if _upcast_of(up, cp):
        return f"the fp32 upcast `{_short(up)}` is dropped"
    if isinstance(up, ast.BinOp) and isinstance(cp, ast.BinOp):
        same = _dump(up.left) == _dump(cp.left) and _dump(up.right) == _dump(cp.right)
        crossed = _dump(up.left) == _dump(cp.right) and _dump(up.right) == _dump(
            cp.left
        )  # a canonical reorder
        if type(up.op) is not type(cp.op) and (same or crossed):
            a, b = _OPS.get(type(up.op)), _OPS.get(type(cp.op))
            if a and b:
                return f"`{_short(cp)}` uses `{b}` where the reference uses `{a}`"
        return None
    if isinstance(up, ast.BinOp) and not (_sequence_like(up.left) or _sequence_like(up.right)):
        if _dump(cp) in (_dump(up.left), _dump(up.right)):
            return f"`{_short(up)}` lost an operand (`{_short(cp)}`)"
        return None
    if isinstance(up, ast.Compare) and isinstance(cp, ast.Compare):
        if len(up.ops) == len(cp.ops) == 1 and _dump(up.left) == _dump(cp.left):
            if _dumps(up.comparators) == _dumps(cp.comparators):
                return f"`{_short(up)}` is tested as `{_short(cp)}`"
        return None
    if isinstance(cp, ast.UnaryOp) and isinstance(cp.op, ast.Not) and _dump(cp.operand) == _dump(up):
        return f"`{_short(up)}` is negated"
    if isinstance(up, ast.UnaryOp) and isinstance(up.op, ast.Not) and _dump(up.operand) == _dump(cp):
        return f"`{_short(up)}` lost its `not`"
    if isinstance(up, ast.BoolOp) and isinstance(cp, ast.BoolOp) and type(up.op) is not type(cp.op):
        if _dumps(up.values) == _dumps(cp.values):
            return f"`{_short(up)}` is combined with the other boolean operator"
        return None
    if isinstance(up, ast.Constant) and isinstance(cp, ast.Constant):
        if isinstance(up.value, (int, float)) and isinstance(cp.value, (int, float)):
            if not isinstance(up.value, bool) and not isinstance(cp.value, bool) and up.value != cp.value:
                return f"the constant `{up.value!r}` is `{cp.value!r}` here"
        return None
    if isinstance(up, ast.Call) and isinstance(cp, ast.Call):
        if _dump(up.func) != _dump(cp.func):
            return None
        ua, ca = [_dump(x) for x in up.args], [_dump(x) for x in cp.args]
        uk = {k.arg: _dump(k.value) for k in up.keywords}
        ck = {k.arg: _dump(k.value) for k in cp.keywords}
        if uk == ck and ua != ca:
            if len(ca) == len(ua) - 1 and all(x in ua for x in ca):
                dropped = next(up.args[i] for i, x in enumerate(ua) if ua.count(x) > ca.count(x))
                if not _available(dropped, bound):
                    return None
                return f"`{_short(up.func)}(...)` is called without the argument `{_short(dropped)}`"
            if len(ca) == len(ua) and sorted(ca) == sorted(ua):
                return f"the arguments of `{_short(up.func)}(...)` are in another order than the reference's"
        if ua == ca and uk != ck and len(ck) == len(uk) - 1 and all(uk.get(k) == v for k, v in ck.items()):
            gone = next(k for k in uk if k not in ck)
            value = next(k.value for k in up.keywords if k.arg == gone)
            if gone is not None and _available(value, bound):
                return f"`{_short(up.func)}(...)` is called without `{gone}=`"
        return None
    if isinstance(up, ast.Attribute) and isinstance(cp, ast.Attribute):
        if _dump(up.value) != _dump(cp.value) or up.attr == cp.attr:
            return None
        if up.attr in _DTYPES and cp.attr in _DTYPES:
            return f"the dtype `{up.attr}` is `{cp.attr}` here"
        if up.attr in _REDUCERS and cp.attr in _REDUCERS:
            return f"the reduction `{up.attr}` is `{cp.attr}` here"
        if cp.attr in reads and twin_names(up.attr, cp.attr):
            return f"`{_short(cp)}` is read where the reference reads `{_short(up)}`"
        return None
    if isinstance(up, ast.Name) and isinstance(cp, ast.Name) and cp.id in reads and twin_names(up.id, cp.id):
        return f"`{cp.id}` is read where the reference reads `{up.id}`"
    if isinstance(up, ast.Slice) and isinstance(cp, ast.Slice):
        if _dump(up.lower) == _dump(cp.upper) and _dump(up.upper) == _dump(cp.lower):
            return f"the slice `{_short(up)}` is taken from the other end"
    return None


def twin_names(a: str, b: str) -> bool:
    """Two names of one pair (``q``/``k``, ``q_proj``/``k_proj``, ``gate_proj``/``up_proj``, ``cos``/``sin``):
    the same words but one, and that one the two sides of a symmetric pair (`_SIDES`)."""
    wa, wb = a.split("_"), b.split("_")
    if a == b or len(wa) != len(wb):
        return False
    diff = [(x, y) for x, y in zip(wa, wb, strict=True) if x != y]
    return len(diff) == 1 and frozenset(diff[0]) in _SIDES


def _reads(func: ast.AST) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(func):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
    return out


def statement_edit(
    up: ast.stmt, cp: ast.stmt, reads: set[str], bound: frozenset[str] | None = None
) -> tuple[ast.AST, str] | None:
    """``(site, what)`` when ``cp`` is ``up`` with one small edit (`classify`), else None."""
    found = _edit(up, cp, reads, bound)
    return (cp, found[2]) if found is not None else None


def _edit(
    up: ast.stmt, cp: ast.stmt, reads: set[str], bound: frozenset[str] | None = None
) -> tuple[object, object, str] | None:
    """``(reference node, copy node, what)`` of the one small edit turning ``up`` into ``cp``."""
    return _canonical_edit(_canon(up), _canon(cp), reads, bound)


def _canonical_edit(
    a: ast.AST, b: ast.AST, reads: set[str], bound: frozenset[str] | None = None
) -> tuple[object, object, str] | None:
    """``_edit`` of two statements already in canonical form (``_canon``; neither is modified)."""
    pairs: list[tuple[object, object]] = []
    _diffs(a, b, pairs)
    if len(pairs) != 1:
        return None
    x, y = pairs[0]
    what = classify(x, y, reads, bound)
    return (x, y, what) if what is not None else None


def _header(stmt: ast.stmt) -> list[tuple[str, object]]:
    return [f for f in ast.iter_fields(stmt) if f[0] not in ("body", "orelse", "handlers", "finalbody")]


def body_edits(
    mine: list[ast.stmt], theirs: list[ast.stmt], reads: set[str], bound: frozenset[str] | None = None
) -> Iterator[tuple[ast.AST, str]]:
    """``(site, what)`` for each statement of ``mine`` that is one statement of ``theirs`` with one small edit;
    the bodies are aligned statement by statement and a compound statement is aligned again inside."""
    theirs, mine = _split(_code(theirs)), _split(_code(mine))
    a = [_key(s) for s in theirs]
    b = [_key(s) for s in mine]
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "replace":
            continue
        up, cp = theirs[i1:i2], mine[j1:j2]
        if len(up) != len(cp):
            # a run rewritten: pair each changed statement with the reference statement it is closest to
            for c in cp:
                if len(up) == 1:
                    yield from _pair(up[0], c, reads, bound)
                    continue
                found = _pairings(up, c, reads, bound)
                if found:  # else no pairing yields: which statement is closest does not matter
                    best = _closest(up, c)
                    yield from next((f for i, f in found.items() if up[i] is best), [])
            continue
        for u, c in zip(up, cp, strict=True):
            yield from _pair(u, c, reads, bound)


def _split(stmts: list[ast.stmt]) -> list[ast.stmt]:
    """``a, b = x, y`` as ``a = x`` and ``b = y`` (the same computation when no right side reads a target)."""
    out: list[ast.stmt] = []
    for s in stmts:
        if (
            isinstance(s, ast.Assign)
            and len(s.targets) == 1
            and isinstance(s.targets[0], ast.Tuple)
            and isinstance(s.value, ast.Tuple)
            and len(s.targets[0].elts) == len(s.value.elts)
            and all(isinstance(t, ast.Name) for t in s.targets[0].elts)
            and not any(
                isinstance(n, ast.Name) and n.id == t.id  # type: ignore[attr-defined]
                for v in s.value.elts[1:]
                for t in s.targets[0].elts[:-1]
                for n in ast.walk(v)
            )
        ):
            for t, v in zip(s.targets[0].elts, s.value.elts, strict=True):
                out.append(ast.copy_location(ast.Assign([t], v, lineno=s.lineno), s))
        else:
            out.append(s)
    return out


def _bodies_equal(u: ast.stmt, c: ast.stmt) -> bool:
    return all(
        [_key(x) for x in _code(getattr(u, f, []))] == [_key(x) for x in _code(getattr(c, f, []))]
        for f in ("body", "orelse")
    )


def _bound(func: ast.AST) -> frozenset[str]:
    """The names a function binds: its parameters, assignment and loop targets, imports."""
    out: set[str] = {"self", "cls"}
    args = getattr(func, "args", None)
    if args is not None:
        for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
            if a is not None:
                out.add(a.arg)
    for n in ast.walk(func):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            out.add(n.id)
        elif isinstance(n, ast.alias):
            out.add((n.asname or n.name).split(".")[0])
    return frozenset(out)


def _available(node: ast.AST, bound: frozenset[str] | None) -> bool:
    """Every local name ``node`` reads is bound in the replacement (None: not checked). An argument upstream
    passes from a name the replacement never binds was left out on purpose (the value is not there)."""
    if bound is None:
        return True
    return all(n.id in bound for n in ast.walk(node) if isinstance(n, ast.Name) and n.id[:1].islower())


def _pair(
    u: ast.stmt, c: ast.stmt, reads: set[str], bound: frozenset[str] | None = None
) -> Iterator[tuple[ast.AST, str]]:
    if type(u) is not type(c) or isinstance(u, _FUNCS):
        return
    inner_u, inner_c = getattr(u, "body", None), getattr(c, "body", None)
    if isinstance(inner_u, list) and isinstance(inner_c, list):
        hu, hc = _header(u), _header(c)
        same = all(_dump(x) == _dump(y) for (_n, x), (_m, y) in zip(hu, hc, strict=True))
        if not same:
            pairs: list[tuple[object, object]] = []
            for (_n, x), (_m, y) in zip(hu, hc, strict=True):
                _diffs(
                    _canon(x) if isinstance(x, ast.AST) else x,
                    _canon(y) if isinstance(y, ast.AST) else y,
                    pairs,
                )
            kept = _bodies_equal(u, c)  # a test edited alone; with its body rewritten too it is a rewrite
            if len(pairs) == 1 and kept:
                what = classify(pairs[0][0], pairs[0][1], reads, bound)
                if what is not None:
                    yield c, what
                    return
            # a header rewritten (another autocast helper): the body below it is still aligned with upstream's
        yield from body_edits(inner_c, inner_u, reads, bound)
        yield from body_edits(getattr(c, "orelse", []), getattr(u, "orelse", []), reads, bound)
        return
    found = statement_edit(u, c, reads, bound)
    if found is not None:
        yield found


def function_edits(mine: ast.AST, theirs: ast.AST) -> list[tuple[ast.AST, str]]:
    """``(site, what)`` for the statements of a replacement ``mine`` that are statements of the reference
    function ``theirs`` with one small edit each."""
    reads = _reads(theirs)
    return list(body_edits(mine.body, theirs.body, reads, _bound(mine)))  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------------------------
# Twin statements: two assignments side by side whose targets are one pair (``q_embed``/``k_embed``,
# ``cos``/``sin``, ``query_states``/``key_states``) are one computation written twice, the second by copying the
# first and swapping the side; each is the other's reference.

_TWIN_WINDOW = 4
# the two sides of the symmetric computations model code writes twice: attention's queries and keys, rotary's
# cosine and sine tables, a gated MLP's two projections, a preference pair's two answers
# the other spellings of a side (``q_t = query[...]`` beside ``k_t = key[...]``)
_SPELLINGS: dict[frozenset[str], tuple[tuple[str, str], ...]] = {
    frozenset({"q", "k"}): (("q", "k"), ("query", "key")),
    frozenset({"query", "key"}): (("q", "k"), ("query", "key")),
}
_SIDES = frozenset(
    {
        frozenset({"q", "k"}),
        frozenset({"query", "key"}),
        frozenset({"cos", "sin"}),
        frozenset({"gate", "up"}),
        frozenset({"chosen", "rejected"}),
    }
)


def _target_name(stmt: ast.stmt) -> str | None:
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        return _leaf(stmt.targets[0])
    if isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        return _leaf(stmt.target)
    return None


def _side_words(a: str, b: str) -> tuple[str, str] | None:
    wa, wb = a.split("_"), b.split("_")
    diff = [(x, y) for x, y in zip(wa, wb, strict=True) if x != y]
    return diff[0] if len(diff) == 1 else None


class _Rename(ast.NodeTransformer):
    """Identifiers of one side renamed to the other's (word by word; ``key`` also as ``k`` when the other word's
    first letter differs)."""

    def __init__(self, words: dict[str, str]) -> None:
        self.words = words

    def _name(self, name: str) -> str:
        return "_".join(self.words.get(w, w) for w in name.split("_"))

    def visit_Name(self, node: ast.Name) -> ast.AST:
        node.id = self._name(node.id)
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        node.attr = self._name(node.attr)
        return node

    def visit_arg(self, node: ast.arg) -> ast.AST:
        node.arg = self._name(node.arg)
        return node


def _renamed(stmt: ast.stmt, words: dict[str, str]) -> ast.stmt:
    return _Rename(words).visit(copy_tree(stmt))  # type: ignore[no-any-return]


def self_attributes(module: ast.AST) -> frozenset[str]:
    """The attribute names the module's code assigns on ``self`` (``self.up_proj = ...``): read once per module
    and file scope (every function of the module asks)."""
    memo = scoped_memo("refedits.self_attributes")
    hit = memo.get(id(module))
    if hit is not None and hit[0] is module:
        return hit[1]  # type: ignore[no-any-return]
    found = frozenset(
        n.attr  # type: ignore[attr-defined]
        for n in nodes_of(module, ast.Attribute)
        if isinstance(n.ctx, ast.Store)  # type: ignore[attr-defined]
        and isinstance(n.value, ast.Name)  # type: ignore[attr-defined]
        and n.value.id == "self"  # type: ignore[attr-defined]
    )
    memo[id(module)] = (module, found)
    return found


def _idents(node: ast.AST) -> set[str]:
    out: set[str] = set()
    for n in walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
    return out


def _func_idents(func: ast.AST) -> set[str]:
    """``_idents(func)`` read from the file index's lists of names and attributes (no walk of the function)."""
    out = {n.id for n in nodes_of(func, ast.Name)}  # type: ignore[attr-defined]
    out.update(n.attr for n in nodes_of(func, ast.Attribute))  # type: ignore[attr-defined]
    return out


def _words_of(node: ast.AST) -> set[str]:
    return {w for name in _idents(node) for w in name.split("_")}


def twin_statement_edits(func: ast.AST, module: ast.AST | None = None) -> list[tuple[ast.stmt, str, str]]:
    """``(site, what, sibling)`` for an assignment that is its twin sibling's (the assignment beside it to the
    other name of a pair) with the side swapped and one more edit: a name of the other side read
    (``q_embed = rot(k.float(), ...)``), an upcast, a constant, an operator or an argument the sibling keeps."""
    return twin_edits_with(func, self_attributes(module) if module is not None else frozenset())


def twin_edits_with(func: ast.AST, attributes: frozenset[str]) -> list[tuple[ast.stmt, str, str]]:
    """``twin_statement_edits`` with the module's ``self`` attributes (``self_attributes``) given: a function of
    ``func``'s subtree and ``attributes`` alone (so its answer can be shared by content, ``core.memo.by_content``)."""
    out: list[tuple[ast.stmt, str, str]] = []
    reported: set[int] = set()
    known: set[str] = set()
    for body in _bodies(func):
        for i, s1 in enumerate(body):
            t1 = _target_name(s1)
            if t1 is None:
                continue
            for s2 in body[i + 1 : i + 1 + _TWIN_WINDOW]:
                t2 = _target_name(s2)
                if t2 is None or t1 == t2 or len(t1.split("_")) != len(t2.split("_")):
                    continue
                side = _side_words(t1, t2)
                if side is None or frozenset(side) not in _SIDES:
                    continue
                w1, w2 = side
                words = {w2: w1, w1: w2}
                own1, own2 = {w1}, {w2}
                for a, b in _SPELLINGS.get(frozenset(side), ()):
                    mine, theirs = (a, b) if a[:1] == w1[:1] else (b, a)
                    words.update({theirs: mine, mine: theirs})
                    own1.add(mine)
                    own2.add(theirs)
                if not known:
                    known = _func_idents(func) | attributes
                found = _twin_edit(s1, s2, words, own1, known) or _twin_edit(s2, s1, words, own2, known)
                if found is not None and id(found[0]) not in reported:
                    reported.add(id(found[0]))
                    out.append(found)
                break
    return out


_TWIN_KINDS = re.compile(
    r"fp32 upcast|is read where|uses `|is tested as|negated|lost its `not`|boolean operator|dtype|reduction"
)
_META = frozenset({"size", "shape", "dtype", "device", "ndim", "dim"})


def _meta_only(stmt: ast.AST, name: str) -> bool:
    """Every read of ``name`` in ``stmt`` asks for a size, a dtype or a device (or is ``len(name)``)."""
    meta = total = 0
    for n in ast.walk(stmt):
        if _leaf(n) == name:
            total += 1
        if isinstance(n, ast.Attribute) and n.attr in _META and _leaf(n.value) == name:
            meta += 1
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "len" and n.args:
            meta += _leaf(n.args[0]) == name
    return total > 0 and meta >= total


def _count(node: ast.AST, name: str) -> int:
    return sum(1 for n in ast.walk(node) if _leaf(n) == name)


def _is_call_of(node: object, method: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == method


def _twin_edit(
    s1: ast.stmt, s2: ast.stmt, words: dict[str, str], own: set[str], known: set[str]
) -> tuple[ast.stmt, str, str] | None:
    mapped = _renamed(s2, words)  # s2 as it would read on s1's side
    canonical = _canon(mapped)
    own_canonical, own_key = _canonical_of(s1)
    if ast.dump(canonical) == own_key:
        return None
    edit = _canonical_edit(canonical, own_canonical, _idents(s1) | _idents(mapped))
    if edit is None:
        return None
    x, y, what = edit
    if isinstance(x, ast.Constant) or not _TWIN_KINDS.search(what):
        # the sides' numbers may differ by design (a row and a column index), and so may a bias, a scaling
        # applied to the queries alone, a flag one side passes (``split_heads(key, k=True)``), a one-sided limit
        return None
    if isinstance(y, ast.Name | ast.Attribute) and _meta_only(s1, _leaf(y) or ""):
        return None  # a size, dtype or device both sides share (``key.view(bsz, q_len, ...)``)
    if isinstance(x, ast.Name | ast.Attribute) and isinstance(y, ast.Name | ast.Attribute):
        # a name of the other side read in place of this side's own: the own name must exist in the function,
        # and the name read must carry the other side's word
        want, got = _leaf(x) or "", _leaf(y) or ""
        other = {w for w in words if w not in own}
        if want not in known:
            return None
        if not (set(got.split("_")) & other):
            # or a name of another pair read twice in place of its twin (``rot(k, sin, sin)``)
            pair = _side_words(want, got) if len(want.split("_")) == len(got.split("_")) else None
            if pair is None or frozenset(pair) not in _SIDES or set(pair) & set(words):
                return None
            if _count(s1, got) <= _count(s1, want):
                return None
    if "is read where" not in what and "upcast" not in what and s2.lineno > s1.lineno:
        # a change either side could hold: the later one, written by copying, is reported, and the edit is
        # described from its side (its own operator against the sibling's)
        back = _edit(_renamed(s1, words), s2, _idents(s2) | _idents(s1))
        return s2, back[2] if back is not None else what, _short(s1)
    return s1, what, _short(s2)


def _canonical_of(stmt: ast.stmt) -> tuple[ast.AST, str]:
    """``stmt``'s canonical form and its key (``_key``), once per statement and file scope: a statement is the
    first of one twin pair and the second of the next (the canonical tree is only read, never modified)."""
    memo = scoped_memo("refedits.twin_canonical")
    hit = memo.get(id(stmt))
    if hit is not None and hit[0] is stmt:
        return hit[1]  # type: ignore[no-any-return]
    canonical = _canon(stmt)
    found = (canonical, ast.dump(canonical))
    memo[id(stmt)] = (stmt, found)
    return found


def _bodies(func: ast.AST) -> Iterator[list[ast.stmt]]:
    stack: list[ast.AST] = [func]
    while stack:
        node = stack.pop()
        for name in ("body", "orelse", "finalbody"):
            block = getattr(node, name, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                yield block
                stack.extend(s for s in block if not isinstance(s, _FUNCS) or s is func)
        for handler in getattr(node, "handlers", ()):
            stack.append(handler)
