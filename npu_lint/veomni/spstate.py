"""A sequence-parallel state model of one function (stdlib only, syntactic).

Under sequence parallelism (Ulysses) a tensor that carries the sequence is in one of a few states on a rank: the
caller's state (``IN``: whatever the function was given), this rank's shard (a slice of a full sequence), the full
sequence (gathered), or the full sequence with a shard of the attention heads (after the Ulysses all-to-all).
``flow(func)`` walks a function's statements in order (the sequence-parallel branch of an ``if`` whose test reads
the SP switch, both branches of any other ``if``), follows every local through assignments, tuple unpacking and
calls (a value computed from a shard is a shard), and records, for the rules that ask it:

- the state of each returned value (``returns``);
- every place where values are used together (packed in one tuple or list, concatenated or stacked, combined by
  arithmetic) with the state of each member (``groups``);
- which locals are siblings (bound by one unpacking statement, or computed from the same caller inputs) and which
  are peers (handed to the same SP transition somewhere in the function).

The transitions are recognised by the called function's last name (the tree's own SP helpers are named for what
they do: ``slice_input_tensor``, ``sp_pad_and_slice``, ``gather_outputs``, ``gather_seq_scatter_heads``,
``gather_heads_scatter_seq``, ``async_ulysses_*``), or a ``t[:, rank * chunk : (rank + 1) * chunk]`` range.
"""

from __future__ import annotations

import ast
import itertools
import re
from dataclasses import dataclass, field

from npu_lint.core.astutil import call_name, last_name
from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (remembered per file)

IN = "in"  # the caller's state
CUT = "shard"  # this rank's shard of a sequence the function held in full (cut here)
BACK = "shard-back"  # this rank's shard again, after a gather of the caller's shard (a round trip)
FULL = "full"  # the full sequence, gathered from this function's own shard (restored)
GATHERED = "gathered"  # the full sequence, gathered from the caller's shard
HEADS = "heads"  # full sequence, a shard of the heads (Ulysses all-to-all)

SHARDS = frozenset({CUT, BACK})
FULLS = frozenset({FULL, GATHERED})

_SLICE = re.compile(
    r"slice_input|sp_pad_and_slice|split_for_sp|sp_slice|slice_sp|scatter_to_sp|split_sequence"
)
_TO_HEADS = re.compile(r"gather_seq_scatter_heads|async_ulysses_qkv|all_to_all_seq_to_head|seq_to_head")
_TO_SEQ = re.compile(
    r"gather_heads_scatter_seq|async_ulysses_output|restore_ulysses|all_to_all_head_to_seq|head_to_seq"
)
# a gather of a sequence across ranks (not `torch.gather`, an index lookup, nor `moe_gather`, an expert combine)
_GATHER = re.compile(
    r"gather_outputs|all_gather|sp_gather|gather_sp|gather_from_sp|gather_forward|gather_sequence"
)
_GUARD = re.compile(
    r"(?<![a-z])(sp|ulysses|sequence_parallel|cp)(?![a-z])|sp_enabled|ulysses_enabled|sp_size|sp_group"
)
_META = frozenset({"device", "dtype", "shape", "ndim", "size", "dim", "numel", "is_cuda", "requires_grad"})
_NOT_DATA_CALLS = frozenset(
    {"len", "isinstance", "range", "int", "float", "bool", "print", "getattr", "hasattr"}
)


@dataclass
class Group:
    """Values used together at ``node``: (expression, state or None, the local it reads) per member."""

    node: ast.AST
    kind: str  # "tuple", "cat", "arith"
    members: list[tuple[ast.expr, str | None, str | None]]
    reached: dict[str, set[str]] = field(default_factory=dict)  # the states each local was in on this path


@dataclass
class Flow:
    states: dict[str, str] = field(default_factory=dict)
    roots: dict[str, frozenset[str]] = field(
        default_factory=dict
    )  # local -> the caller inputs it is computed from
    unpacked: dict[str, int] = field(
        default_factory=dict
    )  # local -> id of the unpacking statement that bound it
    peers: dict[str, set[str]] = field(default_factory=dict)  # transition name -> locals handed to it
    transitions: int = 0
    # (the return, a returned value, the first local it reads, its state there)
    returns: list[tuple[ast.Return, ast.expr, str | None, str | None]] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)
    reached: dict[str, set[str]] = field(default_factory=dict)  # local -> every state it has been in

    def siblings(self, name: str) -> set[str]:
        """Locals bound by the same unpacking statement as ``name``, or computed from the same caller inputs."""
        out: set[str] = set()
        stmt = self.unpacked.get(name)
        if stmt is not None:
            out.update(n for n, s in self.unpacked.items() if s == stmt and n != name)
        roots = self.roots.get(name)
        if roots:
            out.update(n for n, r in self.roots.items() if r == roots and n != name)
        return out

    def expected(self, name: str, own: set[str] | None = None) -> set[str]:
        """The SP states ``name``'s siblings and peers reached: where ``name`` itself was expected to go (less
        the states ``own``, those ``name`` was in itself on the path looked at)."""
        out: set[str] = set()
        for other in self.siblings(name) | {p for ps in self.peers.values() if name in ps for p in ps}:
            if other != name:
                out |= self.reached.get(other, set()) - {IN}
        return out - (
            self.reached.get(name, set()) if own is None else own
        )  # a state it left: no missed step


def _sp_guard(test: ast.AST, flags: set[str]) -> bool | None:
    """True when ``test`` is the SP switch, False when its negation, None for any other test."""
    negated = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
    inner = test.operand if negated else test
    if isinstance(inner, ast.BoolOp) and isinstance(inner.op, ast.And):
        hit = any(_sp_guard(v, flags) for v in inner.values)
        return (not negated) if hit else None
    names = [n.id for n in _walk(inner) if isinstance(n, ast.Name)]
    attrs = [n.attr for n in _walk(inner) if isinstance(n, ast.Attribute)]
    if any(n in flags for n in names) or any(_GUARD.search(a) and "rank" not in a for a in attrs + names):
        return not negated
    return None


def _rank_range(value: ast.AST) -> bool:
    """`t[:, rank * chunk : (rank + 1) * chunk]`, `t[start:end]` with bounds computed from a rank: a window."""
    if not isinstance(value, ast.Subscript):
        return False
    parts = value.slice.elts if isinstance(value.slice, ast.Tuple) else [value.slice]
    for part in parts:
        if isinstance(part, ast.Slice) and part.lower is not None and part.upper is not None:
            for n in _walk(part):
                word = last_name(n) or ""
                if "rank" in word:
                    return True
    return False


_SCALAR = frozenset({"item", "tolist", "sum", "numel", "count_nonzero", "any", "all", "max", "min"})


def _branches(func: ast.AST) -> list[ast.If]:
    """The if/else statements of ``func`` (not of nested functions) whose branches call an SP transition: the
    flow takes each path through them separately."""
    out: list[ast.If] = []
    todo = list(ast.iter_child_nodes(func))
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.If) and node.orelse:
            calls = [call_name(c) for c in _walk(node) if isinstance(c, ast.Call)]
            if any(_TO_HEADS.search(c) or _TO_SEQ.search(c) or _SLICE.search(c) for c in calls if c):
                out.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return out


def _data_names(expr: ast.AST) -> list[str]:
    """The locals ``expr`` reads as data: not those only read for their metadata (shape, device, size) or
    handed to ``len`` / ``isinstance`` and the like."""
    meta: set[int] = set()
    for n in _walk(expr):
        if isinstance(n, ast.Attribute) and n.attr in _META:
            meta.add(id(n.value))
        elif isinstance(n, ast.Call):
            if isinstance(n.func, ast.Name):
                meta.add(id(n.func))
                if n.func.id in _NOT_DATA_CALLS:
                    meta.update(id(x) for x in _walk(n))
            elif isinstance(n.func, ast.Attribute) and n.func.attr in ("size", "dim", "numel"):
                meta.update(id(x) for x in _walk(n))
    return [n.id for n in _walk(expr) if isinstance(n, ast.Name) and id(n) not in meta]


class _Walker:
    def __init__(
        self,
        func: ast.FunctionDef | ast.AsyncFunctionDef,
        choices: dict[int, bool] | None = None,
        memo: dict[tuple[str, int], tuple[ast.AST, object]] | None = None,
    ) -> None:
        self.flow = Flow()
        # what depends on an expression alone (the locals it reads as data, its text), shared by the walkers of
        # one function (``flow`` walks it once per path): keyed by id, with the node kept beside the answer
        self.memo: dict[tuple[str, int], tuple[ast.AST, object]] = {} if memo is None else memo
        self.flags: set[str] = set()
        self.choices = choices or {}
        self.done = False
        args = func.args
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if a is not None and a.arg not in ("self", "cls"):
                self._set(a.arg, IN, frozenset({a.arg}))

    # -- states ---------------------------------------------------------------------------------------------
    def _set(self, name: str, state: str | None, roots: frozenset[str] | None = None) -> None:
        if state is None:
            self.flow.states.pop(name, None)
        else:
            self.flow.states[name] = state
            self.flow.reached.setdefault(name, set()).add(state)
        if roots is not None:
            self.flow.roots[name] = roots

    def _data_names(self, expr: ast.AST) -> list[str]:
        """The locals ``expr`` reads as data (``_data_names``), remembered for the function: read only."""
        hit = self.memo.get(("names", id(expr)))
        if hit is not None and hit[0] is expr:
            return hit[1]  # type: ignore[return-value]
        out = _data_names(expr)
        self.memo[("names", id(expr))] = (expr, out)
        return out

    def _text(self, expr: ast.AST) -> str:
        hit = self.memo.get(("text", id(expr)))
        if hit is not None and hit[0] is expr:
            return hit[1]  # type: ignore[return-value]
        out = ast.unparse(expr)
        self.memo[("text", id(expr))] = (expr, out)
        return out

    def roots_of(self, expr: ast.AST) -> frozenset[str]:
        out: set[str] = set()
        for name in self._data_names(expr):
            out |= self.flow.roots.get(name, frozenset())
        return frozenset(out)

    def state(self, expr: ast.AST) -> str | None:
        """The SP state of ``expr``: a transition's result, else the strongest state of the locals it reads."""
        if _rank_range(expr):
            return self._cut(self.state(expr.value), expr.value)  # type: ignore[attr-defined]
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in _SCALAR:
            return None  # a count or a host value, not a sequence
        if isinstance(expr, ast.BinOp):
            left = self.state(expr.left)  # `hidden + table`: the left operand is the data
            return left if left is not None else self.state(expr.right)
        if isinstance(expr, ast.Call):
            name = call_name(expr)
            first = expr.args[0] if expr.args else None
            if name and (_TO_HEADS.search(name)):
                return HEADS
            if name and _TO_SEQ.search(name):
                return IN  # the heads gathered back, the sequence sharded again: the caller's layout
            if name and _SLICE.search(name):
                return self._cut(self.state(first) if first is not None else None, first)
            if name and _GATHER.search(name) and "scatter" not in name:
                inner = self.state(first) if first is not None else None
                return FULL if inner in (CUT, FULL) else GATHERED
        if isinstance(expr, ast.Call):
            for kw in expr.keywords:  # `replace(out, x=gather_outputs(out.x))`: the object rebuilt around it
                if kw.arg and self._transition_name(kw.value) is not None:
                    return self.state(kw.value)
            if call_name(expr) in (
                "replace",
                "_replace",
            ):  # `replace(args, **sp_kwargs)`: the fields swapped in
                for kw in expr.keywords:
                    inner = self.state(kw.value)
                    if inner not in (None, IN):
                        return inner
            data = expr.args[0] if expr.args and not isinstance(expr.args[0], ast.Starred) else None
            if (
                data is None
                and isinstance(expr.func, ast.Attribute)
                and not isinstance(expr.func.value, ast.Name)
            ):
                data = expr.func.value  # `x.float().view(...)`
            elif (
                data is None
                and isinstance(expr.func, ast.Attribute)
                and isinstance(expr.func.value, ast.Name)
            ):
                if expr.func.value.id in self.flow.states:
                    data = expr.func.value  # `x.view(...)` on a local
            if data is not None:
                inner = self.state(data)
                if inner is not None:
                    return inner  # the data operand (a block's hidden states, a method's receiver) decides
        found = [self.flow.states.get(n) for n in self._data_names(expr)]
        if BACK in found and HEADS not in found:
            return BACK  # side inputs cut to match a sequence that is back in the caller's shard
        for wanted in (HEADS, CUT, BACK, FULL, GATHERED, IN):
            if wanted in found:
                return wanted
        return None

    def _cut(self, inner: str | None, value: ast.AST | None) -> str:
        """What slicing a value in state ``inner`` gives: the caller's shard again after a gather of it; a
        shard cut here otherwise."""
        return BACK if inner == GATHERED else CUT

    def _transition_name(self, value: ast.AST) -> tuple[str, list[str]] | None:
        """(the SP call, the locals it is handed) when ``value`` is an SP transition of locals."""
        if isinstance(value, ast.Call):
            name = call_name(value)
            if name and (
                _TO_HEADS.search(name)
                or _TO_SEQ.search(name)
                or _SLICE.search(name)
                or (_GATHER.search(name) and "scatter" not in name)
            ):
                args = [a.id for a in value.args if isinstance(a, ast.Name)]
                return name, args
        if _rank_range(value):
            base = value.value  # type: ignore[attr-defined]
            return "rank-range", [base.id] if isinstance(base, ast.Name) else []
        return None

    # -- statements -----------------------------------------------------------------------------------------
    def block(self, body: list[ast.stmt]) -> None:
        for stmt in body:
            if self.done:
                return
            self.stmt(stmt)

    def stmt(self, stmt: ast.stmt) -> None:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return
        if isinstance(stmt, ast.If):
            guard = _sp_guard(stmt.test, self.flags)
            self._groups(stmt.test)
            choice = self.choices.get(id(stmt)) if guard is None else None
            if guard is True or choice is True:
                self.block(stmt.body)
                switch = not any(isinstance(n, (ast.Compare, ast.BinOp)) for n in _walk(stmt.test))
                if (
                    guard is True
                    and switch
                    and stmt.body
                    and isinstance(stmt.body[-1], (ast.Return, ast.Raise))
                ):
                    self.done = True  # the SP path returned here: what follows is the path without SP
            elif guard is False or choice is False:
                self.block(stmt.orelse)
            else:
                self.block(stmt.body)
                self.block(stmt.orelse)
            return
        if isinstance(stmt, (ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try)):
            for name in ("iter", "test"):
                part = getattr(stmt, name, None)
                if isinstance(part, ast.AST):
                    self._groups(part)
            if isinstance(stmt, (ast.For, ast.AsyncFor)):
                for target in _names(stmt.target):
                    self._set(target, self.state(stmt.iter), self.roots_of(stmt.iter))
            for name in ("body", "orelse", "finalbody"):
                self.block(getattr(stmt, name, []) or [])
            for handler in getattr(stmt, "handlers", []) or []:
                self.block(handler.body)
            return
        if isinstance(stmt, ast.Return):
            if stmt.value is not None:
                self._groups(stmt.value)
                values = stmt.value.elts if isinstance(stmt.value, ast.Tuple) else [stmt.value]
                if isinstance(stmt.value, ast.Dict):
                    values = [v for v in stmt.value.values if v is not None]
                for v in values:
                    names = self._data_names(v)
                    self.flow.returns.append((stmt, v, names[0] if names else None, self.state(v)))
            return
        if isinstance(stmt, ast.Assign):
            self._groups(stmt.value)
            self._bind(stmt.targets, stmt.value, stmt)
            return
        if isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            self._groups(stmt.value)
            self._bind([stmt.target], stmt.value, stmt)
            return
        if isinstance(stmt, ast.AugAssign):
            self._groups(
                ast.BinOp(
                    left=stmt.target,
                    op=stmt.op,
                    right=stmt.value,
                    lineno=stmt.lineno,
                    col_offset=stmt.col_offset,
                    end_lineno=stmt.end_lineno,
                    end_col_offset=stmt.end_col_offset,
                )
            )
            return
        if isinstance(stmt, ast.Expr):
            self._groups(stmt.value)
            call = stmt.value
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr in ("append", "extend", "insert")
                and isinstance(call.func.value, ast.Name)
                and call.args
            ):
                state = self.state(call.args[-1])  # a list of chunks is in its chunks' state
                if state is not None:
                    self._set(call.func.value.id, state)

    def _bind(self, targets: list[ast.expr], value: ast.expr, stmt: ast.stmt) -> None:
        text = self._text(value) if len(targets) == 1 and isinstance(targets[0], ast.Name) else ""
        if text and _GUARD.search(text) and "rank" not in text and "group" not in text and "size" not in text:
            self.flags.add(targets[0].id)  # type: ignore[union-attr]
        transition = self._transition_name(value)
        if transition is not None:
            self.flow.transitions += 1
            self.flow.peers.setdefault(transition[0], set()).update(transition[1])
        for target in targets:
            if (
                isinstance(target, (ast.Tuple, ast.List))
                and isinstance(value, (ast.Tuple, ast.List))
                and len(target.elts) == len(value.elts)
            ):
                for t, v in zip(target.elts, value.elts):
                    self._bind([t], v, stmt)
                continue
            names = _names(target)
            state = self.state(value)
            roots = self.roots_of(value)
            if transition is not None and len(names) > 1 and len(transition[1]) == len(names):
                for n in names:
                    self.flow.peers[transition[0]].add(n)
            reads = set(self._data_names(value))
            for n in names:
                if n not in reads:
                    self.flow.reached.pop(n, None)  # a fresh value: what the name held before does not count
                self._set(n, state, roots)
                if isinstance(target, (ast.Tuple, ast.List)):
                    self.flow.unpacked[n] = id(stmt)
                else:
                    self.flow.unpacked.pop(n, None)

    def _groups(self, expr: ast.AST) -> None:
        for n in _walk(expr):
            members: list[ast.expr] | None = None
            kind = ""
            if isinstance(n, (ast.Tuple, ast.List)) and len(n.elts) > 1:
                members, kind = list(n.elts), "tuple"
            elif (
                isinstance(n, ast.Call)
                and call_name(n) in ("cat", "concat", "concatenate", "stack")
                and n.args
            ):
                seq = n.args[0]
                if isinstance(seq, (ast.Tuple, ast.List)):
                    members, kind = list(seq.elts), "cat"
            elif isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Add, ast.Sub, ast.Mult)):
                members, kind = [n.left, n.right], "arith"
            if members is None:
                continue
            out = []
            for m in members:
                if isinstance(m, ast.Constant):
                    continue
                names = self._data_names(m)
                out.append((m, self.state(m), names[0] if len(set(names)) == 1 else None))
            if len(out) > 1:
                self.flow.groups.append(Group(n, kind, out, self.flow.reached))


def _names(target: ast.AST) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for e in target.elts for n in _names(e)]
    if isinstance(target, ast.Starred):
        return _names(target.value)
    return []


TRANSITION_WORDS = (
    "slice_input",
    "sp_pad_and_slice",
    "gather_",
    "scatter_heads",
    "scatter_seq",
    "ulysses",
    "rank *",
)
_ANY = re.compile("|".join(re.escape(w) for w in TRANSITION_WORDS))


def mentions_sp(text: str) -> bool:
    """The cheap pre-check: ``text`` (a file, a function's lines) calls one of the SP transitions."""
    return _ANY.search(text) is not None


def not_sequence(name: str | None) -> bool:
    """Attention probabilities (`attn_weights`, `scores`) stay per head by nature: not a sequence to restore."""
    low = (name or "").lower()
    return any(w in low for w in ("weight", "prob", "score"))


def helper_name(name: str) -> bool:
    """A function named for an SP transition (`gather_seq_scatter_heads_qkv`, `_sp_slice`): it returns a
    transitioned value by design."""
    low = name.lower()
    return bool(
        _SLICE.search(low)
        or "gather" in low
        or "scatter" in low
        or "ulysses" in low
        or "sp_" in low
        or "all_to_all" in low
        or "shard" in low
        or "split" in low
    )


def flow(func: ast.FunctionDef | ast.AsyncFunctionDef) -> Flow:
    """The SP-state flow of ``func`` (its nested functions and classes are not entered)."""
    points = _branches(func)[:3]
    memo: dict[tuple[str, int], tuple[ast.AST, object]] = {}
    merged: Flow | None = None
    for bits in itertools.product((True, False), repeat=len(points)):
        walker = _Walker(func, {id(p): b for p, b in zip(points, bits)}, memo)
        walker.block(func.body)
        one = walker.flow
        if merged is None:
            merged = one
            continue
        merged.returns.extend(one.returns)
        merged.groups.extend(one.groups)
        for key, names in one.peers.items():
            merged.peers.setdefault(key, set()).update(names)
        for key, states in one.reached.items():
            merged.reached.setdefault(key, set()).update(states)
        for key, value in one.roots.items():
            merged.roots.setdefault(key, value)
        for key, stmt in one.unpacked.items():
            merged.unpacked.setdefault(key, stmt)
    assert merged is not None
    return merged
