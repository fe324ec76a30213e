"""Helpers shared by the rules of the dispatch family (private to it): the guard finder (NPU203, and NPU201's
per-file summary), the ``OpsConfigSlot`` finder (NPU207, and the summary), and whether a tree's dispatch is
summarised once per file (an OpSlot-generation tree: no instance-local handle API to migrate to)."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import following_statements, walk
from npu_lint.rules._handles import (
    GUARD_ATTRS,
    Block,
    HandleTable,
    block_of,
    call_name,
    guard_of,
    in_function,
    method_name,
    module_handle_names,
    module_scope_calls,
    owner_class,
    self_attr,
    spec_target,
)
from npu_lint.rules.base import Context
from npu_lint.veomni.profile import ApiProfile, Generation


def summarised(api: ApiProfile) -> bool:
    """Whether module-global dispatch is reported once per file (NPU201's summary) instead of once per slot,
    guard and ``OpsConfigSlot`` (NPU201 / NPU203 / NPU207): the tree's generation is OpSlot, which has no
    instance-local handle API, so no single slot can be fixed there. A handle generation targeted with
    ``target-api`` (or present in the tree) gives the per-slot findings."""
    return api.generation is Generation.OP_SLOT


GUARD_NODES: tuple[type[ast.AST], ...] = (ast.If, ast.IfExp, ast.BoolOp, ast.Assign, ast.Try, ast.With)


class GuardFinder:
    """Dispatch guards with an eager fallback (``if slot.use_non_eager_impl: return slot(...)`` then the eager
    copy; ``slot.bound_kernel() or fallback``; a test of the implementation name around a handle call). Feed it
    the nodes of :data:`GUARD_NODES` during the traversal (a ``try`` whose body calls a handle and one of whose
    ``except`` clauses goes on instead of re-raising is a guard too: any kernel error runs the eager copy) (the Context's parents and function must be those of
    the node), then call :meth:`found` once the walk is over."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.handles = HandleTable()
        self.reported: list[tuple[ast.AST, str]] = []
        # (report node, guarded region, what, class, guard receiver): judged once the handles are known
        self.pending: list[tuple[ast.AST, list[ast.AST], str, str | None, ast.AST | None]] = []

    def visit(self, node: ast.AST) -> None:
        ctx = self.ctx
        if isinstance(node, ast.Assign):
            self.handles.visit_assign(ctx, node)
            return
        if isinstance(node, ast.BoolOp):
            if isinstance(node.op, ast.Or) and len(node.values) >= 2:
                first = node.values[0]
                if isinstance(first, ast.Call) and call_name(first) == "bound_kernel":
                    parent = ctx.parent
                    if isinstance(parent, (ast.If, ast.IfExp, ast.While)) and parent.test is node:
                        return  # reported as the test of its if
                    self.reported.append((node, "`.bound_kernel() or <eager fallback>`"))
            return
        if isinstance(node, ast.Try):
            self._try(node)
            return
        if isinstance(node, ast.With):
            self._suppress(node)
            return
        if not isinstance(node, (ast.If, ast.IfExp)):
            return
        test = node.test
        guard = guard_of(ctx, test)
        if guard is None:
            return
        what, receiver, needs_check = guard
        has_fallback = (bool(node.orelse) or self._falls_through(node)) if isinstance(node, ast.If) else True
        if not has_fallback:
            return
        if needs_check:
            region: list[ast.AST] = [node]
            if isinstance(node, ast.If) and not node.orelse:
                region.extend(
                    following_statements(self.ctx.parent, node)
                )  # the path taken when the guarded branch returns
            self.pending.append((test, region, what, owner_class(ctx, ctx.function), receiver))
            return
        self.reported.append((test, what))

    def _try(self, node: ast.Try) -> None:
        """``try: <handle call> except ...: <eager code>``: a handler that does not end by raising swallows the
        kernel's error and runs its own code (or the code after the ``try``) instead."""
        fallback = [h for h in node.handlers if not (h.body and isinstance(h.body[-1], ast.Raise))]
        if not fallback:
            return
        caught = ", ".join(
            sorted({ast.unparse(h.type) if h.type is not None else "everything" for h in fallback})
        )
        what = f"`try`/`except {caught}` around the handle call"
        # judged once the handles are known: the region is the try body only (a handle called in a handler is
        # the fallback's business, not the guarded call)
        self.pending.append((node, list(node.body), what, owner_class(self.ctx, self.ctx.function), None))

    def _suppress(self, node: ast.With) -> None:
        """``with contextlib.suppress(...): return <handle call>`` then eager code: the same swallowed error."""
        for item in node.items:
            call = item.context_expr
            if isinstance(call, ast.Call) and call_name(call) == "suppress":
                caught = ", ".join(ast.unparse(a) for a in call.args) or "nothing"
                what = f"`with suppress({caught})` around the handle call"
                self.pending.append(
                    (node, list(node.body), what, owner_class(self.ctx, self.ctx.function), None)
                )
                return

    def _falls_through(self, node: ast.If) -> bool:
        """The guarded branch returns and code follows the `if` in its block (the eager copy)."""
        if not node.body or not isinstance(node.body[-1], (ast.Return, ast.Raise)):
            return False
        parent = self.ctx.parent
        for name in ("body", "orelse", "finalbody"):
            stmts = getattr(parent, name, None)
            if isinstance(stmts, list) and node in stmts:
                return stmts.index(node) < len(stmts) - 1
        return False

    def found(self) -> list[tuple[ast.AST, str]]:
        """(node to report, what the guard is) of every guard, in traversal order of their decision."""
        out = list(self.reported)
        for test, region, what, cls, receiver in self.pending:
            if receiver is not None:
                if self.handles.is_handle(self.ctx, receiver, cls):  # type: ignore[arg-type]
                    out.append((test, what))
                continue
            # the handle whose implementation name is tested (`if self.veomni_moe.impl == "eager":`), or a
            # handle called in the guarded region
            if not isinstance(test, (ast.Try, ast.With)) and any(
                isinstance(sub, ast.Attribute) and self.handles.is_handle(self.ctx, sub, cls)
                for sub in walk(test)
            ):
                out.append((test, what))
                continue
            if any(
                isinstance(sub, ast.Call) and self.handles.is_handle(self.ctx, sub.func, cls)
                for part in region
                for sub in walk(part)
            ):
                out.append((test, what))
        self.pending = []
        self.reported = []
        return out


def ops_config_slots(ctx: Context, node: ast.Call) -> list[tuple[ast.Call, Block | None]]:
    """The module-scope ``OpsConfigSlot(...)`` declarations a call is or holds: the call itself at import time,
    or those of a spec's post-import block (``config.add_post_import_block("...")``)."""
    name = call_name(node)
    block_call = isinstance(node.func, ast.Attribute) and node.func.attr == "add_post_import_block"
    if name != "OpsConfigSlot" and not block_call:
        return []
    if in_function(ctx):
        return []
    if name == "OpsConfigSlot":
        return [(node, None)]
    block = block_of(ctx, node)
    if block is None:
        return []
    return [
        (call, block)
        for call in sorted(module_scope_calls(block.tree), key=lambda c: (c.lineno, c.col_offset))
        if call_name(call) == "OpsConfigSlot"
    ]


def _owned_functions(tree: ast.Module) -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """(owner class, function) of every method: a class's own methods, and the module-level functions a patch
    spec registers as a class's methods (``@config.override_method("Cls.forward")``)."""
    out: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]] = []
    for stmt in tree.body:
        if isinstance(stmt, ast.ClassDef):
            for sub in stmt.body:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    out.append((stmt.name, sub))
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            cls = spec_target(stmt)[0]
            if cls is not None:
                out.append((cls, stmt))
    return out


def _slot_reads(node: ast.AST, slots: frozenset[str]) -> list[tuple[ast.AST, str]]:
    """Reads of a module-global slot's binding in ``node``: ``slot.use_non_eager_impl`` (and the other guard
    attributes), ``slot.bound_kernel()``, and the slot itself as a value."""
    found: list[tuple[ast.AST, str]] = []
    for sub in walk(node):
        if (
            isinstance(sub, ast.Attribute)
            and isinstance(sub.value, ast.Name)
            and sub.value.id in slots
            and (sub.attr in GUARD_ATTRS or sub.attr == "bound_kernel")
        ):
            found.append((sub, sub.value.id))
    return found


def cached_slot_reads(ctx: Context) -> list[tuple[ast.AST, str, str, str]]:
    """Where a method reads the process-wide binding of a module-global slot although its instance cached the
    slot's kernel on ``self`` in another method (``self.fn = slot.bound_kernel() or eager`` in ``__init__``,
    then ``if not slot.use_non_eager_impl:`` in ``forward``): (read node, slot, ``self.<attr>``, the caching
    method's name). Another model that rebinds the slot changes what the read says, not what the instance
    runs, so the two diverge."""
    if "bound_kernel" not in ctx.source.text:  # no instance caches a slot's kernel
        return []
    slots = module_handle_names(ctx)
    if not slots:
        return []
    owned = _owned_functions(ctx.tree)
    # (class, slot) -> (attr, method) of the caching assignment, and the assignments' values (not reads)
    caches: dict[tuple[str, str], tuple[str, ast.AST]] = {}
    cache_values: set[int] = set()
    for cls, func in owned:
        for sub in walk(func):
            if not isinstance(sub, ast.Assign):
                continue
            attrs = [t.attr for t in sub.targets if self_attr(t) is not None]  # type: ignore[attr-defined]
            if not attrs:
                continue
            for read, slot in _slot_reads(sub.value, slots):
                if isinstance(read, ast.Attribute) and read.attr == "bound_kernel":
                    caches.setdefault((cls, slot), (attrs[0], func))
                    cache_values.update(id(n) for n in walk(sub.value))
    if not caches:
        return []
    out: list[tuple[ast.AST, str, str, str]] = []
    for cls, func in owned:
        for read, slot in _slot_reads(func, slots):
            cache = caches.get((cls, slot))
            if cache is None or cache[1] is func or id(read) in cache_values:
                continue
            out.append((read, slot, cache[0], method_name(cache[1]) or getattr(cache[1], "name", "?")))
    out.sort(key=lambda item: (item[0].lineno, item[0].col_offset))  # type: ignore[attr-defined]
    return out
