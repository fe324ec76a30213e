"""Resolving a call to the tree's own definition (shared: NPU510/NPU511, NPU459, NPU317).

The truth is the tree being linted: a callee is a top-level ``def``/``class`` of the linted file, a method of
the enclosing class (``self.m(...)``), or a name the file imports from a module of the tree (followed through
re-exports by the tree's :class:`~npu_lint.veomni.imports.ModuleIndex`). Anything else (external packages,
rebound names, attributes of instances) resolves to nothing, so the rules stay quiet."""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass

from npu_lint.core.astutil import dotted_name, module_package, nodes_of, resolve_relative, walk
from npu_lint.rules.base import Context
from npu_lint.veomni.imports import ModuleIndex
from npu_lint.veomni.signatures import Signature, function_signature, module_signatures, tuple_arity

MAX_BASES = 4


@dataclass(frozen=True)
class Callee:
    sig: Signature
    where: str  # "path:line" of the definition, for messages
    label: str  # how the message names it: `f`, `Cls` (its `__init__`), `Cls.m`
    same_file: bool = False  # a top-level definition of the linted file itself


def file_module(ctx: Context) -> str | None:
    cached = ctx.memo.get("pkg-contract-module", False)
    if cached is not False:
        return cached  # type: ignore[return-value]
    package = module_package(ctx.source.path)
    stem = os.path.splitext(os.path.basename(ctx.source.path))[0]
    module = ".".join([*package, stem]) if package and stem != "__init__" else ".".join(package) or None
    ctx.memo["pkg-contract-module"] = module
    return module


def _own_signatures(ctx: Context) -> dict[str, Signature]:
    cached = ctx.memo.get("pkg-contract-sigs")
    if cached is None:
        # the file's own returns are read only when NPU511 asks (``own_returns``)
        cached = ctx.memo["pkg-contract-sigs"] = module_signatures(ctx.tree.body, arity=False)
    return cached  # type: ignore[return-value]


def _rebinds(ctx: Context, name: str) -> bool:
    """Whether ``name`` is bound anywhere but by its one top-level def/class or import (a parameter, an
    assignment, a loop target, a nested def): then a call of it may reach something else. One walk of the
    file answers for every name."""
    bound = ctx.memo.get("pkg-contract-rebound")
    if bound is None:
        names: set[str] = set()
        tops: dict[str, int] = {}
        top_nodes = set()
        for stmt in ctx.tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                tops[stmt.name] = tops.get(stmt.name, 0) + 1
                top_nodes.add(id(stmt))
        for node in walk(ctx.tree):
            if isinstance(node, ast.Name):
                if not isinstance(node.ctx, ast.Load):
                    names.add(node.id)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                names.update(node.names)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if id(node) not in top_nodes:
                    names.add(node.name)
        names.update(n for n, count in tops.items() if count > 1)
        bound = ctx.memo["pkg-contract-rebound"] = frozenset(names)
    return name in bound  # type: ignore[operator]


def confirmed(ctx: Context, call: ast.Call, found: Callee) -> bool:
    """A finding's last check: a callee named by a bare name that is rebound somewhere in the file (a
    parameter, an assignment, a nested def) may be something else at this call."""
    return not (isinstance(call.func, ast.Name) and _rebinds(ctx, call.func.id))


def own_returns(ctx: Context, found: Callee) -> int | None:
    """The tuple arity of a callee's returns (read now for a top-level function of the linted file)."""
    if not found.same_file:
        return found.sig.returns
    key = ("pkg-contract-returns", found.sig.name)
    if key not in ctx.memo:
        arity = None
        for stmt in ctx.tree.body:
            if isinstance(stmt, ast.FunctionDef) and stmt.name == found.sig.name:
                arity = tuple_arity(stmt)
        ctx.memo[key] = arity
    return ctx.memo[key]  # type: ignore[return-value]


def _index(ctx: Context) -> ModuleIndex | None:
    return ctx.project.api.index if ctx.project.root else None


def _rel(ctx: Context, path: str) -> str:
    root = ctx.project.root
    if root:
        try:
            return os.path.relpath(path, root)
        except ValueError:
            return path
    return path


def _resolve_dotted(index: ModuleIndex, qual: str) -> tuple[str, Signature] | None:
    if "." not in qual or not index.is_local(qual):
        return None
    memo = index.__dict__.setdefault("_contract_callees", {})  # per run, like the index's own caches
    if qual in memo:
        return memo[qual]  # type: ignore[no-any-return]
    memo[qual] = found = _resolve_uncached(index, qual)
    return found


def _resolve_uncached(index: ModuleIndex, qual: str) -> tuple[str, Signature] | None:
    module, name = qual.rsplit(".", 1)
    if not index.has_module(module):
        return None
    origin = index.origin(module, name) or module
    sig = index.signatures(origin).get(name)
    return (origin, sig) if sig is not None else None


def _settle(
    index: ModuleIndex | None,
    module: str | None,
    sig: Signature,
    own: dict[str, Signature] | None,
    depth: int = 0,
) -> Signature | None:
    """A class that inherits its constructor: the first base with an answer decides (None: unknown)."""
    if not sig.inherits:
        return sig
    if depth >= MAX_BASES:
        return None
    base = sig.inherits[0]
    if "." not in base:
        if own is not None and base in own:
            return _settle(index, module, own[base], own, depth + 1)
        if index is None or module is None:
            return None
        found = index.signatures(module).get(base)
        if found is not None:
            return _settle(index, module, found, None, depth + 1)
        info = index.info(module)
        if info is None or base not in info.reexports:
            return None
        source, source_name = info.reexports[base]
        if source_name is None:
            return None
        resolved = _resolve_dotted(index, f"{source}.{source_name}")
    else:
        resolved = _resolve_dotted(index, base) if index is not None else None
    if resolved is None:
        return None
    origin, found = resolved
    return _settle(index, origin, found, None, depth + 1)


def callee(ctx: Context, call: ast.Call) -> Callee | None:
    """The tree's own definition that ``call`` reaches, with a signature that can be trusted, or None. Asked
    during the walk, at ``call`` (its enclosing class and function are the Context's): once per call and file
    (NPU510 and NPU511 ask about the same calls)."""
    key = ("pkg-callee", id(call))
    hit = ctx.memo.get(key)
    if hit is not None and hit[0] is call:  # type: ignore[index]
        return hit[1]  # type: ignore[index,no-any-return]
    found = _callee(ctx, call)
    ctx.memo[key] = (call, found)
    return found


def _callee(ctx: Context, call: ast.Call) -> Callee | None:
    func = call.func
    index = _index(ctx)
    own = _own_signatures(ctx)
    module = file_module(ctx)
    if isinstance(func, ast.Name):
        name = func.id
        if name in own and name not in ctx.imports:
            sig = _settle(index, module, own[name], own)
            if sig is None or sig.opaque:
                return None
            # whether the name is rebound is asked only when a call breaks the contract (``confirmed``)
            return Callee(sig, f"{_rel(ctx, ctx.source.path)}:{sig.line}", f"`{name}`", same_file=True)
        qual = ctx.imports.get(name)
        if qual is None or index is None:
            return None
    elif isinstance(func, ast.Attribute):
        if isinstance(func.value, ast.Name) and func.value.id == "self":
            return _method(ctx, func.attr)
        if func.attr == "__init__" and _bare_super(func.value):
            return _super_init(ctx, index, module, own)
        if index is None:
            return None
        qual = ctx.qualname(func)
        root = dotted_name(func)
        if qual is None or root is None or qual == root:
            return None  # not reached through an import
    else:
        return None
    if qual.startswith("."):
        qual = resolve_relative(ctx.source.path, qual)
    resolved = _resolve_dotted(index, qual)
    if resolved is None:
        return None
    origin, sig = resolved
    settled = _settle(index, origin, sig, None)
    if settled is None or settled.opaque:
        return None
    located = index.module_path(origin)
    where = f"{_rel(ctx, str(located[0]))}:{sig.line}" if located else origin
    return Callee(settled, where, f"`{sig.name}`")


def _method(ctx: Context, name: str) -> Callee | None:
    """``self.<name>(...)`` inside a class of this file that defines ``<name>`` (and no class of this file
    subclasses it, which could override the method with another signature)."""
    cls = ctx.class_
    func = ctx.function
    if cls is None or func is None:
        return None
    key = ("pkg-contract-method", id(cls), name)
    if key in ctx.memo:
        return ctx.memo[key]  # type: ignore[return-value]
    found: Callee | None = None
    bases = ctx.memo.get("pkg-contract-bases")
    if bases is None:
        bases = ctx.memo["pkg-contract-bases"] = frozenset(
            dotted_name(b) for n in ctx.tree.body if isinstance(n, ast.ClassDef) for b in n.bases
        )
    subclassed = cls.name in bases  # type: ignore[operator]
    defs = [s for s in cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == name]
    if not subclassed and len(defs) == 1 and not _rebound_on_instance(cls, name, ctx.memo):
        sig = function_signature(defs[0], method=True)
        decorators = {dotted_name(d) for d in defs[0].decorator_list}
        if not sig.opaque and "property" not in decorators:
            found = Callee(sig, f"{_rel(ctx, ctx.source.path)}:{sig.line}", f"`{cls.name}.{name}`")
    ctx.memo[key] = found
    return found


def _rebound_on_instance(cls: ast.ClassDef, name: str, memo: dict[object, object] | None = None) -> bool:
    """The class body or one of its methods rebinds ``<name>`` (``self.attn = self._attn_npu``,
    ``setattr(self, "attn", ...)``, ``attn = _attn_npu``): ``self.<name>`` may be another callable. The class
    is read once (into ``memo``, the file's, when given) for every name asked about."""
    key = ("pkg-rebound", id(cls))
    hit = memo.get(key) if memo is not None else None
    if hit is not None and hit[0] is cls:  # type: ignore[index]
        names, any_name = hit[1]  # type: ignore[index]
    else:
        names, any_name = _class_rebinds(cls)
        if memo is not None:
            memo[key] = (cls, (names, any_name))
    return any_name or name in names


def _class_rebinds(cls: ast.ClassDef) -> tuple[frozenset[object], bool]:
    """The names a class rebinds on its instances or in its body, and whether a ``setattr(self, <not a
    constant>, ...)`` may rebind any name."""
    names: set[object] = set()
    any_name = False
    # a set and a flag: the order the nodes are read in does not matter (the file index's lists, no walk)
    for node in nodes_of(cls, ast.Attribute):
        if isinstance(node.ctx, ast.Store):  # type: ignore[attr-defined]
            if isinstance(node.value, ast.Name) and node.value.id == "self":  # type: ignore[attr-defined]
                names.add(node.attr)  # type: ignore[attr-defined]
    for node in nodes_of(cls, ast.Call):
        if isinstance(node.func, ast.Name) and node.func.id == "setattr":  # type: ignore[attr-defined]
            args = node.args  # type: ignore[attr-defined]
            if len(args) >= 2 and isinstance(args[0], ast.Name) and args[0].id == "self":
                if isinstance(args[1], ast.Constant):
                    names.add(args[1].value)
                else:
                    any_name = True
    for stmt in cls.body:
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            for t in getattr(stmt, "targets", [getattr(stmt, "target", None)]):
                if isinstance(t, ast.Name):
                    names.add(t.id)
    return frozenset(names), any_name


def _bare_super(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "super"
        and not node.args
        and not node.keywords
    )


def _super_init(
    ctx: Context, index: ModuleIndex | None, module: str | None, own: dict[str, Signature]
) -> Callee | None:
    """``super().__init__(...)`` in a class of this file with one base: that base's constructor."""
    cls = ctx.class_
    if cls is None or len(cls.bases) != 1 or cls.keywords:
        return None
    base = dotted_name(cls.bases[0])
    if base is None:
        return None
    if base in ctx.imports:
        qual = ctx.imports[base]
        if qual.startswith("."):
            qual = resolve_relative(ctx.source.path, qual)
        base = qual
    sig = _settle(index, module, Signature(cls.name, "class", inherits=(base,)), own)
    if sig is None or sig.opaque:
        return None
    return Callee(sig, f"the base of `{cls.name}`", f"`{dotted_name(cls.bases[0])}`")


def _arg_name(node: ast.expr) -> str | None:
    """The name an argument spells: a local (``q``), or the last attribute of a read (``self.backward``)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def misplaced_arguments(call: ast.Call, sig: Signature) -> list[tuple[ast.expr, str, str]]:
    """``(argument, its name, the parameter it lands in)``: positional arguments of ``call`` that sit in each
    other's parameters by the callee's own names (``forward(k, q, cos)`` to ``def forward(q, k, cos)``,
    ``make(self.backward, self.forward)`` to ``def make(forward, backward)``). One name misplaced alone, or passed twice, says little: a layer's
    ``input_dim`` is the down projection's output size, a second conv takes ``(out_channels, out_channels)``,
    keys stand in for queries on purpose."""
    if sig.opaque or any(isinstance(a, ast.Starred) for a in call.args):
        return []
    params = sig.positional
    names = [_arg_name(a) for a in call.args]
    keywords = {kw.arg for kw in call.keywords}
    out: list[tuple[ast.expr, str, str]] = []
    for i, (arg, name) in enumerate(zip(call.args, names)):
        if i >= len(params) or name is None or name == params[i] or name not in params:
            continue
        if name in keywords:
            continue
        j = params.index(name)
        if j >= len(names):
            continue
        if names[j] == params[i] and names.count(name) == 1:
            out.append((arg, name, params[i]))
    return out
