"""Equivalent spellings of upstream statements in a copy, read with the enclosing function as context (NPU458).

`losspath._Canon` makes one statement's spellings alike on its own. Some rewrites keep what upstream computes only
given the function around them: a temporary the copy introduces (``g = gate.float()`` then ``x * (g *
torch.sigmoid(g))``), a top-k whose values are dropped taken on the logits instead of their softmax along the same
axis, a norm submodule applied after a head/sequence transpose that leaves its (last) axis in place. A `Keys` pair
built from the two functions gives each statement a key with these made alike too, and says which statements only
bind such a temporary.
"""

from __future__ import annotations

import ast
from collections import Counter

from npu_lint.core.astutil import call_name, copy_tree, last_name
from npu_lint.core.astutil import walk as _walk
from npu_lint.veomni.losspath import _Canon, _is_fp32
from npu_lint.veomni.upstream import same_node

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
# calls a temporary's value may hold and still be copied to each use: tensor views, casts and elementwise math
_RANDOM = (
    "dropout",
    "rand",
    "randn",
    "randint",
    "randperm",
    "bernoulli",
    "multinomial",
    "normal_",
    "uniform_",
)
# index-only results of these do not change under a monotone increasing map of their input along the axis
_INDEX_ONLY = ("argmax", "argmin", "argsort")


def _bound_names(func: ast.AST) -> Counter[str]:
    """How often each name is bound in a function (parameters, assignments, loop and ``with`` targets, walrus)."""
    out: Counter[str] = Counter()
    args = getattr(func, "args", None)
    if args is not None:
        for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
            if a is not None:
                out[a.arg] += 1
    for node in _walk(func):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out[node.id] += 1
        elif isinstance(node, _FUNCS) and node is not func:
            out[getattr(node, "name", "<lambda>")] += 1
    return out


def single_bindings(func: ast.AST) -> dict[str, ast.expr]:
    """Names a function binds once, by a plain ``name = value`` (not a parameter, loop target or unpacking)."""
    counts = _bound_names(func)
    out: dict[str, ast.expr] = {}
    for node in _walk(func):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and counts[node.targets[0].id] == 1
        ):
            out[node.targets[0].id] = node.value
    return out


def _pure(value: ast.expr) -> bool:
    """A value that may be written out at each use: no submodule call (``self.x(...)``), no random draw, no
    in-place method, no lambda or comprehension scope."""
    for node in _walk(value):
        if isinstance(
            node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Await)
        ):
            return False
        if isinstance(node, ast.Call):
            name = call_name(node)
            func = node.func
            if (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and func.value.id == "self"
            ):
                return False
            if any(r in name for r in _RANDOM) or (name.endswith("_") and not name.endswith("__")):
                return False
    return True


def _softmax_input(node: ast.AST) -> tuple[ast.expr, str] | None:
    """``(x, axis)`` of a softmax / log-softmax of ``x`` (``F.softmax(x, dim=-1)``, ``x.softmax(-1)``)."""
    if not isinstance(node, ast.Call) or call_name(node) not in ("softmax", "log_softmax"):
        return None
    func = node.func
    functional = isinstance(func, ast.Attribute) and last_name(func.value) in ("torch", "F", "functional")
    if isinstance(func, ast.Name):
        functional = True
    args = list(node.args)
    if functional:
        if not args:
            return None
        x, rest = args[0], args[1:]
    else:
        if not isinstance(func, ast.Attribute):
            return None
        x, rest = func.value, args
    dim = next((k.value for k in node.keywords if k.arg in ("dim", "axis")), rest[0] if rest else None)
    if dim is None:
        return None
    return x, ast.unparse(dim)


def _elementwise_increasing(node: ast.AST) -> ast.expr | None:
    """``x`` of an elementwise strictly increasing map of it (``sigmoid``, ``exp``, an fp32 upcast)."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    name = call_name(node)
    if not isinstance(func, ast.Attribute):
        return None
    receiver_is_module = last_name(func.value) in ("torch", "F", "functional")
    if name in ("sigmoid", "exp"):
        if receiver_is_module:
            return node.args[0] if len(node.args) == 1 and not node.keywords else None
        return func.value if not node.args and not node.keywords else None
    if not receiver_is_module and (
        (name == "float" and not node.args)
        or (name == "to" and len(node.args) == 1 and _is_fp32(node.args[0]))
    ):
        return func.value
    return None


class _InContext(_Canon):
    """`_Canon` with the function around the statement: temporaries written out at their uses, and the
    equivalences above made alike."""

    def __init__(self, env: dict[str, ast.expr], temps: dict[str, ast.expr]) -> None:
        super().__init__()
        self.env, self.temps, self.depth = env, temps, 0

    def visit_Name(self, node: ast.Name) -> ast.AST:
        value = self.temps.get(node.id)
        if value is None or not isinstance(node.ctx, ast.Load) or self.depth > 8:
            return node
        self.depth += 1
        try:
            return self.visit(copy_tree(value))
        finally:
            self.depth -= 1

    def _resolve(self, node: ast.AST) -> ast.AST:
        if isinstance(node, ast.Name) and node.id in self.env:
            return copy_tree(
                self.env[node.id]
            )  # never the function's own nodes: the transformer edits in place
        return node

    def _monotone_base(self, node: ast.expr, axis: str) -> ast.expr:
        """``node`` with strictly increasing maps along ``axis`` taken off (a softmax over that axis, an
        elementwise sigmoid/exp/upcast), looking through names bound once."""
        for _ in range(8):
            value = self._resolve(node)
            soft = _softmax_input(value)
            if soft is not None and soft[1] == axis:
                node = soft[0]
                continue
            inner = _elementwise_increasing(value)
            if inner is not None:
                node = inner
                continue
            break
        return node

    def _index_only_topk(self, call: ast.Call) -> None:
        """Make a top-k/sort whose values are dropped read the base of a monotone map of its input."""
        func = call.func
        if not isinstance(func, ast.Attribute):
            return
        functional = last_name(func.value) == "torch"
        axis_kw = next((k for k in call.keywords if k.arg in ("dim", "axis")), None)
        if call_name(call) == "topk":
            pos = 2 if functional else 1
        else:
            pos = 1 if functional else 0
        axis = (
            ast.unparse(axis_kw.value)
            if axis_kw is not None
            else (ast.unparse(call.args[pos]) if len(call.args) > pos else "-1")
        )
        if functional and call.args:
            call.args[0] = self._monotone_base(call.args[0], axis)
        elif not functional:
            func.value = self._monotone_base(func.value, axis)

    def visit_Assign(self, node: ast.Assign) -> ast.AST:
        value = node.value
        target = node.targets[0] if len(node.targets) == 1 else None
        if (
            isinstance(value, ast.Call)
            and call_name(value) in ("topk", "sort")
            and isinstance(target, ast.Tuple)
            and len(target.elts) == 2
            and isinstance(target.elts[0], ast.Name)
            and target.elts[0].id == "_"
        ):
            self._index_only_topk(value)
        return super().generic_visit(node)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        if call_name(node) in _INDEX_ONLY:
            self._index_only_topk(node)
        new = super().visit_Call(node)
        if not isinstance(new, ast.Call):
            return new
        func = new.func
        if (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == "torch"
            and func.attr in (*_INDEX_ONLY, "topk", "sort")
            and new.args
        ):  # ``torch.topk(x, k)``: ``x.topk(k)``
            new = ast.Call(ast.Attribute(new.args[0], func.attr, ast.Load()), new.args[1:], new.keywords)
            func = new.func
        if isinstance(func, ast.Attribute) and func.attr in (*_INDEX_ONLY, "topk", "sort"):
            pos = 1 if func.attr == "topk" else 0  # the axis given by position: ``dim=``
            if len(new.args) == pos + 1 and not any(k.arg in ("dim", "axis") for k in new.keywords):
                new.keywords = sorted(
                    [*new.keywords, ast.keyword("dim", new.args[pos])], key=lambda k: k.arg or ""
                )
                new.args = new.args[:pos]
        # ``F.silu(x)`` / ``torch.nn.functional.silu(x)``: ``x.silu()``
        if (
            call_name(new) == "silu"
            and isinstance(func, ast.Attribute)
            and last_name(func.value) in ("F", "functional", "torch")
            and len(new.args) == 1
            and not new.keywords
        ):
            return ast.Call(ast.Attribute(new.args[0], "silu", ast.Load()), [], [])
        moved = self._transpose_out_of_norm(new)
        return moved if moved is not None else new

    def _transpose_out_of_norm(self, call: ast.Call) -> ast.Call | None:
        """``self.q_norm(x.view(*lead, heads, dim).transpose(1, 2))`` as ``self.q_norm(x.view(...)).transpose(1,
        2)``: a norm submodule normalises the last axis, and a transpose of two leading axes of a head split (its
        starred leading shape is at least batch and sequence) leaves that axis where it is."""
        func = call.func
        if not (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == "self"
            and "norm" in func.attr.lower()
            and len(call.args) == 1
            and not call.keywords
        ):
            return None
        arg = call.args[0]
        if not (
            isinstance(arg, ast.Call)
            and isinstance(arg.func, ast.Attribute)
            and arg.func.attr == "transpose"
            and len(arg.args) == 2
            and not arg.keywords
            and all(isinstance(a, ast.Constant) and type(a.value) is int and a.value >= 0 for a in arg.args)
        ):
            return None
        view = arg.func.value
        if not (
            isinstance(view, ast.Call) and isinstance(view.func, ast.Attribute) and view.func.attr == "view"
        ):
            return None
        shape: list[ast.expr] = list(view.args)
        if len(shape) == 1:
            resolved = self._resolve(shape[0])
            if isinstance(resolved, (ast.Tuple, ast.List)):
                shape = list(resolved.elts)
        rank = sum(2 if isinstance(e, ast.Starred) else 1 for e in shape)
        if rank < max(a.value for a in arg.args) + 2:  # type: ignore[attr-defined]
            return None
        normed = ast.Call(func, [view], [])
        return ast.Call(ast.Attribute(normed, "transpose", ast.Load()), arg.args, [])

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        new = super().visit_BinOp(node)
        if isinstance(new, ast.BinOp) and isinstance(new.op, ast.Mult):
            for x, sig in ((new.left, new.right), (new.right, new.left)):
                if (
                    isinstance(sig, ast.Call)
                    and isinstance(sig.func, ast.Attribute)
                    and sig.func.attr == "sigmoid"
                    and not sig.args
                    and same_node(sig.func.value, x)
                ):
                    return ast.Call(ast.Attribute(x, "silu", ast.Load()), [], [])  # x * sigmoid(x)
        return new


class Keys:
    """Statement keys for aligning a copy (``mine``) with upstream's function (``theirs``)."""

    def __init__(self, mine: ast.AST, theirs: ast.AST) -> None:
        env_m, env_t = single_bindings(mine), single_bindings(theirs)
        named_m = {n.id for n in _walk(mine) if isinstance(n, ast.Name)}
        named_t = {n.id for n in _walk(theirs) if isinstance(n, ast.Name)}
        self.temps_m = {k: v for k, v in env_m.items() if k not in named_t and _pure(v)}
        self.temps_t = {k: v for k, v in env_t.items() if k not in named_m and _pure(v)}
        self.env_m, self.env_t = env_m, env_t

    def _temp_binding(self, stmt: ast.stmt, temps: dict[str, ast.expr]) -> bool:
        return (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
            and stmt.targets[0].id in temps
        )

    def drop_mine(self, stmt: ast.stmt) -> bool:
        return self._temp_binding(stmt, self.temps_m)

    def drop_theirs(self, stmt: ast.stmt) -> bool:
        return self._temp_binding(stmt, self.temps_t)

    def mine(self, stmt: ast.stmt) -> str:
        return ast.dump(_InContext(self.env_m, self.temps_m).visit(copy_tree(stmt)))

    def theirs(self, stmt: ast.stmt) -> str:
        return ast.dump(_InContext(self.env_t, self.temps_t).visit(copy_tree(stmt)))
