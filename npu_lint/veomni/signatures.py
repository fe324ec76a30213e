"""Call signatures of a tree's own top-level functions and classes, read statically (never imported).

A :class:`Signature` says which positional and keyword arguments a call may pass, and, for a function whose
every ``return`` hands back a tuple of one length, that length. Classes answer with their ``__init__`` (less
``self``), or with a dataclass's fields, or say which bases decide (``inherits``). Anything the reader cannot
vouch for (an unknown decorator, a metaclass, ``__new__``, ``*args``/``**kwargs``) makes the signature
permissive, so callers never get a finding they could not trust.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from npu_lint.core.astutil import child_nodes, dotted_name, nodes_of

# decorators that keep the decorated function's call signature
_TRANSPARENT = frozenset(
    {
        "staticmethod",
        "classmethod",
        "lru_cache",
        "cache",
        "functools.lru_cache",
        "functools.cache",
        "torch.no_grad",
        "no_grad",
        "torch.inference_mode",
        "torch.compiler.disable",
        "torch._dynamo.disable",
        "wraps",
        "functools.wraps",
        "override",
        "typing.override",
    }
)


@dataclass(frozen=True)
class Signature:
    name: str
    kind: str  # "function" | "class"
    positional: tuple[str, ...] = ()  # parameters a positional argument may fill, in order
    keywords: frozenset[str] = frozenset()  # names a keyword argument may use
    varargs: bool = False
    varkw: bool = False
    opaque: bool = False  # the reader cannot vouch for the signature: accept every call
    inherits: tuple[str, ...] = ()  # a class without its own __init__: the dotted bases that decide
    returns: int | None = None  # the arity when every return is a tuple literal of that one length
    line: int = 0
    # parameters without a default (positional ones in order, then keyword-only)
    required: tuple[str, ...] = ()
    defaults: tuple[tuple[str, str], ...] = ()  # (parameter, its default as source text) for those with one
    unread: frozenset[str] = frozenset()  # parameters the function's body never reads (a function's own def)

    def default_of(self, name: str) -> str | None:
        """The default of parameter ``name`` as source text (None: required, or no such parameter)."""
        for param, text in self.defaults:
            if param == name:
                return text
        return None

    def missing(self, positional: int, keywords: set[str]) -> list[str]:
        """The required parameters a call with ``positional`` plain positional arguments and these keywords
        leaves unfilled (none for an opaque signature)."""
        if self.opaque:
            return []
        filled = set(self.positional[:positional]) | keywords
        return [p for p in self.required if p not in filled]

    def accepts_keyword(self, name: str) -> bool:
        return self.opaque or self.varkw or name in self.keywords

    def max_positional(self) -> int | None:
        return None if (self.opaque or self.varargs) else len(self.positional)


def _decorator_name(node: ast.expr) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    return dotted_name(target) or ""


def _args_signature(
    name: str, kind: str, args: ast.arguments, drop_first: bool, opaque: bool, line: int
) -> Signature:
    positional = [p.arg for p in (*args.posonlyargs, *args.args)]
    posonly = {p.arg for p in args.posonlyargs}
    required = positional[: len(positional) - len(args.defaults)]
    required += [p.arg for p, d in zip(args.kwonlyargs, args.kw_defaults) if d is None]
    defaults = [
        (p, ast.unparse(d)) for p, d in zip(positional[len(positional) - len(args.defaults) :], args.defaults)
    ]
    defaults += [(p.arg, ast.unparse(d)) for p, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
    if drop_first and positional:
        if required and required[0] == positional[0]:
            required = required[1:]
        positional = positional[1:]
    keywords = frozenset([p for p in positional if p not in posonly] + [p.arg for p in args.kwonlyargs])
    # ``**super_kwargs`` (transformers' modular convention): "the parent's signature", not a catch-all
    opaque = opaque or (args.kwarg is not None and args.kwarg.arg == "super_kwargs")
    return Signature(
        name,
        kind,
        tuple(positional),
        keywords,
        varargs=args.vararg is not None,
        varkw=args.kwarg is not None,
        opaque=opaque,
        line=line,
        required=tuple(required),
        defaults=tuple(defaults),
    )


def tuple_arity(func: ast.FunctionDef | ast.AsyncFunctionDef) -> int | None:
    """N when every ``return`` of ``func`` (nested scopes excluded) returns a tuple literal of N >= 2 plain
    elements and the function is not a generator; None otherwise."""
    arity: int | None = None
    stack: list[ast.AST] = list(func.body)
    seen_return = False
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, (ast.Yield, ast.YieldFrom, ast.Await)):
            return None
        if isinstance(node, ast.Return):
            seen_return = True
            value = node.value
            if not isinstance(value, ast.Tuple) or any(isinstance(e, ast.Starred) for e in value.elts):
                return None
            if arity is None:
                arity = len(value.elts)
            elif arity != len(value.elts):
                return None
        stack.extend(child_nodes(node))
    if not seen_return or arity is None or arity < 2:
        return None
    return arity


def function_signature(
    node: ast.FunctionDef | ast.AsyncFunctionDef, method: bool = False, arity: bool = True
) -> Signature:
    """The signature a call of ``node`` must match (``method``: called bound, so ``self``/``cls`` is not
    passed, unless it is a staticmethod)."""
    names = [_decorator_name(d) for d in node.decorator_list]
    opaque = any(n not in _TRANSPARENT and n.rsplit(".", 1)[-1] not in _TRANSPARENT for n in names)
    drop = method and "staticmethod" not in names
    sig = _args_signature(node.name, "function", node.args, drop, opaque, node.lineno)
    read = {n.id for stmt in node.body for n in nodes_of(stmt, ast.Name)}  # type: ignore[attr-defined]
    unread = frozenset(p for p in (*sig.positional, *sig.keywords) if p not in read)
    if unread:
        sig = Signature(**{**sig.__dict__, "unread": unread})
    returns = tuple_arity(node) if arity and not isinstance(node, ast.AsyncFunctionDef) else None
    if returns is not None:
        sig = Signature(**{**sig.__dict__, "returns": returns})
    return sig


def _dataclass_fields(node: ast.ClassDef, required: list[str] | None = None) -> list[str] | None:
    """The init fields of a plain dataclass in order (``required``: filled with those without a default)."""
    out: list[str] = []
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            ann = dotted_name(
                stmt.annotation.value if isinstance(stmt.annotation, ast.Subscript) else stmt.annotation
            )
            if ann and ann.rsplit(".", 1)[-1] == "KW_ONLY":
                continue  # ``_: KW_ONLY``: a sentinel, no field (the fields after it are keyword-only)
            if ann and ann.rsplit(".", 1)[-1] in ("ClassVar", "InitVar"):
                if ann.rsplit(".", 1)[-1] == "InitVar":
                    out.append(stmt.target.id)
                continue
            value = stmt.value
            if isinstance(value, ast.Call) and (dotted_name(value.func) or "").rsplit(".", 1)[-1] == "field":
                for kw in value.keywords:
                    if kw.arg in ("init", "kw_only"):
                        return None  # not modelled: accept every call
            out.append(stmt.target.id)
            if stmt.value is None and required is not None:
                required.append(stmt.target.id)
    return out


def class_signature(node: ast.ClassDef) -> Signature:
    """What calling the class accepts: its own ``__init__``, a plain dataclass's fields, or (``inherits``) the
    bases' answer. A metaclass, ``__new__``, ``__call__``-style factories or unknown decorators: opaque."""
    names = [_decorator_name(d) for d in node.decorator_list]
    dataclass_like = any(n.rsplit(".", 1)[-1] == "dataclass" for n in names)
    others = [n for n in names if n.rsplit(".", 1)[-1] not in ("dataclass", "final", "total_ordering")]
    opaque = bool(others) or bool(node.keywords)
    init = None
    for stmt in node.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if stmt.name == "__new__":
                opaque = True
            elif stmt.name == "__init__":
                init = stmt
        elif isinstance(stmt, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__init__" for t in stmt.targets
        ):
            opaque = True
    if opaque:
        return Signature(node.name, "class", opaque=True, line=node.lineno)
    if init is not None:
        sig = function_signature(init, method=True, arity=False)  # a call of a class returns an instance
        return Signature(**{**sig.__dict__, "name": node.name, "kind": "class", "returns": None})
    bases = tuple(dotted_name(b) or "?" for b in node.bases)
    if bases in (("NamedTuple",), ("typing.NamedTuple",)) and init is None and not names:
        needed_nt: list[str] = []
        fields = _dataclass_fields(node, needed_nt)
        if fields is None:
            return Signature(node.name, "class", opaque=True, line=node.lineno)
        return Signature(
            node.name, "class", tuple(fields), frozenset(fields), line=node.lineno, required=tuple(needed_nt)
        )
    if dataclass_like:
        needed: list[str] = []
        fields = _dataclass_fields(node, needed)
        if fields is None or bases:
            return Signature(node.name, "class", opaque=True, line=node.lineno)
        return Signature(
            node.name, "class", tuple(fields), frozenset(fields), line=node.lineno, required=tuple(needed)
        )
    if not bases:
        return Signature(node.name, "class", line=node.lineno)
    return Signature(node.name, "class", inherits=bases, line=node.lineno)


def module_signatures(body: list[ast.stmt], arity: bool = True) -> dict[str, Signature]:
    """Signatures of the top-level ``def`` and ``class`` statements of a module (a name bound twice: none)."""
    out: dict[str, Signature] = {}
    twice: set[str] = set()
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            sig = function_signature(stmt, arity=arity)
        elif isinstance(stmt, ast.ClassDef):
            sig = class_signature(stmt)
        else:
            continue
        if sig.name in out:
            twice.add(sig.name)
        out[sig.name] = sig
    twice.update(_rebound(body) & set(out))
    for name in twice:
        del out[name]
    return out


def _rebound(body: list[ast.stmt]) -> set[str]:
    """Names a module-level statement (inside ``if`` / ``try`` / ``with`` too) assigns or imports: a def
    rewrapped (``gather = compat(gather)``) or swapped (``if npu: reduce = _reduce_v2``) is no longer its
    ``def``."""
    out: set[str] = set()
    todo: list[ast.AST] = list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update(a.asname or a.name.split(".")[0] for a in node.names)
        todo.extend(ast.iter_child_nodes(node))
    return out
