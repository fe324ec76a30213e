"""What a custom autograd backward computes its gradients from: the tensors the forward saved, followed through
the backward's assignments, in-place calls and kernel launches into the values it returns (metadata reads such as
``w.dtype`` or ``x.shape`` do not carry a value). Asked by NPU474."""

from __future__ import annotations

import ast
from collections.abc import Iterator

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


def unused_saved(cls: ast.ClassDef) -> Iterator[tuple[ast.Name, ast.FunctionDef]]:
    """Saved tensors a Function's backward unpacks and never uses for the values of the gradients it returns."""
    backward = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "backward"), None)
    if backward is None:
        return
    names = [n for n in saved_names(backward) if not n.id.startswith("_")]
    if not names:
        return
    ctx = backward.args.args[0].arg if backward.args.args else "ctx"
    for call in _own(backward):  # the context handed whole to a helper: what it reads is not visible here
        if isinstance(call, ast.Call) and any(isinstance(a, ast.Name) and a.id == ctx for a in call.args):
            return
    sources = gradient_sources(backward)
    for name in names:
        if name.id not in sources:
            yield name, backward
