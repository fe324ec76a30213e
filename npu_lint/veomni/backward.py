"""What a custom autograd Function keeps for its backward and what the backward does with it: the one
saved-for-backward analysis (``kept_for_backward``). Each value the forward keeps (``ctx.save_for_backward(...)``
unpacked from ``ctx.saved_tensors``, or a ``ctx.<attr>`` it sets) is recorded with whether the backward reads it
at all and whether the gradients it returns depend on its values: followed through the backward's assignments,
in-place calls and kernel launches (metadata reads such as ``w.dtype`` or ``x.shape`` do not carry a value).
NPU444 (a loss path's backward dropping a kept factor) asks the first, NPU474 (a norm's backward dropping its
saved weight) the second."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
# attribute reads and methods that give a tensor's metadata, not its values
_META = frozenset(
    {
        "dtype",
        "shape",
        "device",
        "size",
        "dim",
        "ndim",
        "numel",
        "stride",
        "is_contiguous",
        "requires_grad",
        "layout",
    }
)


def is_autograd_function(cls: ast.ClassDef) -> bool:
    return any(
        (isinstance(b, ast.Attribute) and b.attr == "Function")
        or (isinstance(b, ast.Name) and b.id == "Function")
        for b in cls.bases
    )


def _own(node: ast.AST) -> Iterator[ast.AST]:
    stack = [node]
    while stack:
        cur = stack.pop()
        yield cur
        stack.extend(c for c in ast.iter_child_nodes(cur) if not isinstance(c, _FUNCS))


def value_reads(node: ast.AST) -> set[str]:
    """Names an expression reads for their values: ``w.dtype``, ``x.shape[0]``, ``x.size(1)``, ``len(x)`` aside."""
    skip: set[int] = set()
    out: set[str] = set()
    for n in _own(node):
        if isinstance(n, ast.Attribute) and n.attr in _META and isinstance(n.value, ast.Name):
            skip.add(id(n.value))
        elif (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name)
            and n.func.id in ("len", "isinstance", "type")
        ):
            skip.update(id(a) for a in n.args)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and id(n) not in skip:
            out.add(n.id)
    return out


def _targets(stmt: ast.stmt) -> set[str]:
    names: set[str] = set()
    targets: list[ast.AST] = []
    if isinstance(stmt, ast.Assign):
        targets = list(stmt.targets)
    elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
        targets = [stmt.target]
    elif isinstance(stmt, (ast.For, ast.AsyncFor)):
        targets = [stmt.target]
    for t in targets:
        for n in ast.walk(t):
            if isinstance(n, ast.Name):
                names.add(n.id)
            elif isinstance(n, (ast.Subscript, ast.Attribute)):  # ``dx[...] = v``: v flows into dx
                base = n
                while isinstance(base, (ast.Subscript, ast.Attribute)):
                    base = base.value
                if isinstance(base, ast.Name):
                    names.add(base.id)
    return names


def _simple_statements(func: ast.AST) -> list[ast.stmt]:
    return [
        n
        for n in _own(func)
        if isinstance(
            n, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Return, ast.For, ast.AsyncFor)
        )
    ]


def _nested_defs(func: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Helpers a backward defines inside itself (``def _scale(t): return t * w``): calling one reads what it
    closes over."""
    return [
        c
        for n in _own(func)
        for c in ast.iter_child_nodes(n)
        if isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]


def _autograd_backward(node: ast.AST) -> bool:
    """``y.backward(g)`` / ``torch.autograd.backward(y, g)``: a recomputed graph's backward, writing the
    gradients into its leaves' ``.grad``."""
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "backward"
    )


def gradient_sources(backward: ast.AST) -> set[str]:
    """Every name the values a backward returns depend on, through its assignments; a call made for its effect
    (an in-place op, a kernel launch writing into an output buffer) that reads a needed name makes every name
    it reads needed too."""
    stmts = _simple_statements(backward)
    needed: set[str] = set()
    for s in stmts:
        if isinstance(s, ast.Return) and s.value is not None:
            needed |= value_reads(s.value)
        if isinstance(s, ast.Expr) and _autograd_backward(s.value):
            needed |= value_reads(s.value)  # the gradients it writes are what the backward returns
    closures = {
        d.name: {n.id for n in ast.walk(d) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        for d in _nested_defs(backward)
    }
    changed = True
    while changed:
        changed = False
        for name, reads in closures.items():
            if name in needed and not reads <= needed:
                needed |= reads
                changed = True
        for s in stmts:
            if isinstance(s, ast.Return):
                continue
            if isinstance(s, ast.Expr):
                reads = value_reads(s.value)
                if reads & needed and not reads <= needed:
                    needed |= reads
                    changed = True
                continue
            value = s.iter if isinstance(s, (ast.For, ast.AsyncFor)) else getattr(s, "value", None)
            if value is None:
                continue
            targets = _targets(s)
            if targets & needed:
                reads = value_reads(value)
                if isinstance(s, ast.AugAssign):
                    reads |= targets
                if not reads <= needed:
                    needed |= reads
                    changed = True
    return needed


def saved_names(backward: ast.AST) -> list[ast.Name]:
    """The names a backward unpacks from ``ctx.saved_tensors``."""
    out: list[ast.Name] = []
    for n in _own(backward):
        if (
            isinstance(n, ast.Assign)
            and len(n.targets) == 1
            and isinstance(n.targets[0], (ast.Tuple, ast.List))
            and isinstance(n.value, ast.Attribute)
            and n.value.attr in ("saved_tensors", "saved_variables")
        ):
            out.extend(e for e in n.targets[0].elts if isinstance(e, ast.Name))
    return out


@dataclass(frozen=True)
class Kept:
    """A value a Function's forward keeps for its backward."""

    name: str  # the backward's name for a saved tensor (`w`), or `ctx.<attr>` for a context attribute
    node: ast.AST  # the unpacked name in the backward, or the forward's assignment of the attribute
    attribute: bool  # kept as a context attribute (`ctx.scale = ...`), not through `save_for_backward`
    read: bool  # the backward reads it at all (a nested function of the backward included)
    # the values of the gradients the backward returns depend on it; None when not known (an attribute, a tensor
    # unpacked in a nested function, or a backward handing its context to a helper, whose reads are not visible)
    gradient: bool | None
    # when its values do not reach the gradients: the last statement of the backward that binds a value computed
    # from it which the gradients never use (`w32 = weight.float()` left unused): where the value was dropped
    dropped: ast.stmt | None = None


def _ctx_name(func: ast.AST) -> str | None:
    args = getattr(func, "args", None)
    if args is None or not args.args:
        return None
    return args.args[0].arg


def _unpacks(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], (ast.Tuple, ast.List))
        and isinstance(node.value, ast.Attribute)
        and node.value.attr in ("saved_tensors", "saved_variables")
    )


def kept_for_backward(cls: ast.ClassDef) -> list[Kept]:
    """What ``cls``'s forward keeps for its backward and how the backward uses each (``Kept``); private names
    (``_``-prefixed) of the unpacking are left out, as are the context's own flags (``needs_``/``mark_``/``set_``)."""
    methods = {f.name: f for f in cls.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
    fwd, bwd = methods.get("forward"), methods.get("backward")
    if bwd is None:
        return []
    bctx = _ctx_name(bwd)
    every = list(ast.walk(bwd))
    loads = {n.id for n in every if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    own = {id(n) for n in _own(bwd)}
    # the context handed whole to a helper: what it reads is not visible here
    opaque = any(
        isinstance(call, ast.Call)
        and any(isinstance(a, ast.Name) and a.id == (bctx or "ctx") for a in call.args)
        for call in _own(bwd)
    )
    sources: set[str] | None = None
    out: list[Kept] = []
    fctx = _ctx_name(fwd) if fwd is not None else None
    if fwd is not None and fctx is not None and bctx is not None:
        attrs = {
            n.attr
            for n in every
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == bctx
        }
        # `getattr(ctx, "scale", 1)` reads its attribute; `getattr(ctx, name)`, or the context handed whole to a
        # helper (`return _backward(ctx, grad)`), may read any
        any_attr = opaque
        for n in every:
            if (
                isinstance(n, ast.Call)
                and isinstance(n.func, ast.Name)
                and n.func.id in ("getattr", "hasattr")
                and len(n.args) >= 2
                and isinstance(n.args[0], ast.Name)
                and n.args[0].id == bctx
            ):
                name = n.args[1].value if isinstance(n.args[1], ast.Constant) else None
                if isinstance(name, str):
                    attrs.add(name)
                else:
                    any_attr = True
        for n in ast.walk(fwd):
            if isinstance(n, ast.Assign):
                for t in n.targets:
                    if (
                        isinstance(t, ast.Attribute)
                        and isinstance(t.value, ast.Name)
                        and t.value.id == fctx
                        and not t.attr.startswith(("needs_", "mark_", "set_"))
                    ):
                        out.append(Kept(f"{fctx}.{t.attr}", n, True, any_attr or t.attr in attrs, None))
    for n in every:
        if not _unpacks(n):
            continue
        for elt in n.targets[0].elts:  # type: ignore[attr-defined]
            if not isinstance(elt, ast.Name) or elt.id.startswith("_"):
                continue
            gradient: bool | None = None
            dropped: ast.stmt | None = None
            if id(n) in own and not opaque:
                if sources is None:
                    sources = gradient_sources(bwd)
                gradient = elt.id in sources
                if not gradient:
                    dropped = _dropped_at(bwd, elt.id, sources)
            out.append(Kept(elt.id, elt, False, elt.id in loads, gradient, dropped))
    return out


def _dropped_at(bwd: ast.AST, name: str, sources: set[str]) -> ast.stmt | None:
    """The last assignment in ``bwd`` that computes a value from ``name`` (its values, not its metadata) into a
    name the returned gradients never depend on."""
    found: ast.stmt | None = None
    for stmt in _simple_statements(bwd):
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
            targets = _targets(stmt)
            if targets and not targets & sources and name in value_reads(stmt.value):
                if found is None or stmt.lineno > found.lineno:
                    found = stmt
    return found


def unused_saved(cls: ast.ClassDef) -> Iterator[tuple[ast.Name, ast.AST]]:
    """Saved tensors a Function's backward unpacks and never uses for the values of the gradients it returns: (the
    unpacked name, where its value was dropped: the last statement computing from it a value the gradients never
    use, else the unpacked name)."""
    for kept in kept_for_backward(cls):
        if kept.gradient is False:
            yield kept.node, kept.dropped or kept.node  # type: ignore[misc]
