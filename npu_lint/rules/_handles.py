"""Dispatch handles as a file declares them (OpSlot / VeomniOp constructors, post-import blocks, the
handle table of module globals and ``self.<attr>``): shared by the dispatch and semantics families."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from npu_lint.core.astutil import (
    call_arg,
    literal_getattr,
    parse_snippet,
    statements,
    str_value,
)  # re-exported for the families
from npu_lint.core.diagnostics import Applicability, Fix
from npu_lint.rules.base import Context, collect_imports
from npu_lint.veomni.catalog import ANY, CONFIG_FIELD_TO_OP, NPU, OPSLOT_TO_VEOMNIOP, OpRow
from npu_lint.veomni.profile import BUILTIN_PROFILES, ApiProfile, Generation

# -- recognisers ------------------------------------------------------------------------------------

# the API names of every generation, from the built-in profiles (npu_lint.veomni.profile): a file is read
# whatever generation it was written for; messages and fixes use the tree's profile (``ctx.project.api``)
_PROFILES = tuple(BUILTIN_PROFILES.values())
HANDLES = frozenset(p.handle for p in _PROFILES)  # OpSlot, VeomniOp, VeomniKernel
INSTANCE_HANDLES = frozenset(p.handle for p in _PROFILES if p.generation is not Generation.OP_SLOT)
ROW_RESOLVERS = frozenset(p.resolve_function for p in _PROFILES if p.resolve_function)  # resolve_op, ...
IMPL_RESOLVERS = frozenset(
    p.resolver for p in _PROFILES if p.resolver
)  # resolve_op_impl, resolve_kernel_impl
ATTENTION_HELPERS = frozenset(p.attention_helper for p in _PROFILES if p.attention_helper)
REGISTER_FUNCTIONS = frozenset(p.register_function for p in _PROFILES if p.register_function)
CONSTRUCTORS = HANDLES | ROW_RESOLVERS | ATTENTION_HELPERS
HANDLE_CONSTRUCTORS = HANDLES | ROW_RESOLVERS
GUARD_ATTRS = {"use_non_eager_impl", "use_eager_impl", "is_bound"}
_CAST_METHODS = {"to", "float", "type_as", "type", "half", "bfloat16", "contiguous", "detach"}
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def call_name(node: ast.AST, ctx: Context | None = None) -> str | None:
    """Last component of a called name: ``OpSlot`` for ``dispatch.OpSlot(...)``. With ``ctx`` a bare name is
    resolved through the file's imports first (the Context's resolver), so ``_Slot(...)`` after
    ``from veomni.ops.dispatch import OpSlot as _Slot`` is ``OpSlot``."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if isinstance(func, ast.Name):
        if ctx is not None:
            qual = ctx.local_qualname(func)
            if qual:
                return qual.rsplit(".", 1)[-1]
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


REGISTRY_OBJECTS = frozenset({"KERNEL_REGISTRY", "OP_REGISTRY"})


def registry_read(node: ast.AST, ctx: Context) -> bool:
    """``KERNEL_REGISTRY.resolve(op, variant, impl)`` (the registry object under any alias or module path):
    a kernel taken from the registry, like ``resolve_op``."""
    if not (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "resolve"
    ):
        return False
    receiver = ctx.qualname(node.func.value) or ""
    return receiver.rsplit(".", 1)[-1] in REGISTRY_OBJECTS


def constructor_kind(node: ast.AST, ctx: Context | None = None) -> str | None:
    """OpSlot / VeomniOp / resolve_op / attention_op / bound_kernel for a dispatch-creating call (import
    aliases resolved when ``ctx`` is given; a registry-object read counts as ``resolve_op``)."""
    name = call_name(node, ctx)
    if name in CONSTRUCTORS:
        return name
    if name == "bound_kernel" and isinstance(node.func, ast.Attribute):  # type: ignore[union-attr]
        return "bound_kernel"
    if ctx is not None and registry_read(node, ctx):
        return "resolve_op"
    return None


def module_handle_names(ctx: Context) -> frozenset[str]:
    """Module globals bound to an OpSlot / VeomniOp / resolved row (file scope or post-import blocks)."""
    cached = ctx.memo.get("module_handle_names")
    if cached is not None:
        return cached  # type: ignore[return-value]
    names: set[str] = set()
    bodies = [ctx.tree.body, *(b.tree.body for b in post_import_blocks(ctx))]
    for body in bodies:
        for stmt in body:
            if isinstance(stmt, ast.Assign) and constructor_kind(stmt.value, ctx) in HANDLE_CONSTRUCTORS:
                names.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
    frozen = frozenset(names)
    ctx.memo["module_handle_names"] = frozen
    return frozen


def instance_handle_attrs(ctx: Context) -> frozenset[str]:
    """``self.<attr>`` names the file binds to a dispatch handle (``self.veomni_x = VeomniOp(...)``, an OpSlot's
    ``bound_kernel()``), or to a callable bound to one (``functools.partial(helper, op=self.veomni_x)``, a
    lambda calling one). Cached per file."""
    cached = ctx.memo.get("instance_handle_attrs")
    if cached is not None:
        return cached  # type: ignore[return-value]
    direct: set[str] = set()
    wrappers: dict[str, list[ast.expr]] = {}
    for sub in ast.walk(ctx.tree):
        if not isinstance(sub, ast.Assign):
            continue
        attrs = [a for a in (self_attr(t) for t in sub.targets) if a is not None]
        if not attrs:
            continue
        if isinstance(sub.value, ast.Call) and constructor_kind(sub.value, ctx) in (
            *HANDLE_CONSTRUCTORS,
            "bound_kernel",
        ):
            direct.update(attrs)
        elif _wrapper(ctx, sub.value):
            for attr in attrs:
                wrappers.setdefault(attr, []).append(sub.value)
    found = set(direct)
    changed = True
    while changed:  # wrappers of wrappers
        changed = False
        for attr, values in wrappers.items():
            if attr not in found and any(self_attr(inner) in found for v in values for inner in _wrapped(v)):
                found.add(attr)
                changed = True
    frozen = frozenset(found)
    ctx.memo["instance_handle_attrs"] = frozen
    return frozen


def op_variant(call: ast.Call, kind: str | None = None) -> tuple[str | None, str | None]:
    """(op, variant) literals of a handle constructor, OpSlot names mapped to the VeomniOp ones."""
    kind = kind or call_name(call)
    first = "op_name" if kind == "OpSlot" else "op"
    op = str_value(call_arg(call, 0, first))
    variant = str_value(call_arg(call, 1, "variant"))
    if kind == "OpSlot" and op is not None and variant is not None:
        op, variant = OPSLOT_TO_VEOMNIOP.get((op, variant), (op, variant))
    return op, variant


def in_function(ctx: Context) -> bool:
    return ctx.enclosing(*_SCOPES) is not None


def spec_target(func: ast.AST) -> tuple[str | None, str | None]:
    """(class, method) a patch-spec function replaces, from its decorator.

    ``@config.override_method("Cls.forward")`` -> ("Cls", "forward"); ``@config.modify_init("Cls")`` ->
    ("Cls", "__init__"); ``@config.replace_function("name")`` -> (None, "name").
    """
    for deco in getattr(func, "decorator_list", ()):
        if not isinstance(deco, ast.Call) or not isinstance(deco.func, ast.Attribute):
            continue
        target = str_value(deco.args[0]) if deco.args else None
        if target is None:
            target = next((str_value(k.value) for k in deco.keywords if k.arg in ("target", "name")), None)
        if target is None:
            continue
        kind = deco.func.attr
        if kind == "override_method" and "." in target:
            cls, _, method = target.rpartition(".")
            return cls, method
        if kind == "modify_init":
            return target, "__init__"
        if kind == "replace_function":
            return None, target
    return None, None


def owner_class(ctx: Context, func: ast.AST | None) -> str | None:
    """The class a function belongs to: its enclosing class, or the class a patch-spec function patches."""
    if func is None:
        return None
    cls = ctx.class_
    if cls is not None and func in cls.body:
        return cls.name
    return spec_target(func)[0]


def method_name(func: ast.AST | None) -> str | None:
    """A function's effective name: the patched method's name for a patch-spec replacement."""
    if func is None:
        return None
    target = spec_target(func)[1]
    return target or getattr(func, "name", None)


# -- post-import blocks -----------------------------------------------------------------------------


@dataclass
class Block:
    """A parsed ``config.add_post_import_block("...")`` string, with positions mapped to the file."""

    call: ast.Call
    tree: ast.Module
    lines: list[str]  # lines of the dedented code
    margin: int  # indentation removed by the dedent
    first_line: int  # file line of the string's first content line
    first_col: int  # file column (code points) where the content starts on its first line
    exact: bool  # whether the literal's text equals its value (no escapes), so columns map exactly
    anchor: tuple[int, int, int, int] = (1, 0, 1, 0)  # where the string literal starts (fallback position)

    def position(self, node: ast.AST) -> tuple[int, int, int, int]:
        """(line, col, end_line, end_col) in the spec file, code points."""
        if not self.exact:  # the string literal's own position
            return self.anchor
        line, col = self._map(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end_line, end_col = self._map(node.end_lineno or node.lineno, node.end_col_offset or 0)  # type: ignore[attr-defined]
        return line, col, end_line, end_col

    def _map(self, line: int, byte_col: int) -> tuple[int, int]:
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else ""
        col = len(text.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))
        file_line = self.first_line + line - 1
        base = self.first_col if line == 1 else 0
        return file_line, base + self.margin + col

    def offsets(self, ctx: Context, node: ast.AST) -> tuple[int, int] | None:
        if not self.exact:
            return None
        line, col, end_line, end_col = self.position(node)
        return ctx.source.offset(line, col), ctx.source.offset(end_line, end_col)


def _dedent(value: str) -> tuple[list[str], int]:
    lines = value.split("\n")
    indents = [len(ln) - len(ln.lstrip(" \t")) for ln in lines if ln.strip()]
    margin = min(indents) if indents else 0
    prefixes = {ln[:margin] for ln in lines if ln.strip()}
    if len(prefixes) > 1:  # mixed tabs/spaces: give up on mapping, keep textwrap's behaviour
        import textwrap

        return textwrap.dedent(value).split("\n"), -1
    return [ln[margin:] if ln.strip() else "" for ln in lines], margin


def _parse_block(ctx: Context, call: ast.Call) -> Block | None:
    arg = call.args[0] if call.args else None
    value = str_value(arg)
    if arg is None or value is None:
        return None
    lines, margin = _dedent(value)
    tree = parse_snippet("\n".join(lines))
    if tree is None:
        return None
    src = ctx.source
    literal = src.segment(arg)
    exact = False
    first_line, first_col = arg.lineno, src.char_col(arg.lineno, arg.col_offset)
    prefix_len = len(literal) - len(literal.lstrip("rRuUbBfF"))
    body = literal[prefix_len:]
    for quote in ('"""', "'''", '"', "'"):
        if body.startswith(quote) and body.endswith(quote) and len(body) >= 2 * len(quote):
            raw = body[len(quote) : -len(quote)]
            exact = raw.replace("\r\n", "\n").replace("\r", "\n") == value and margin >= 0
            first_col += prefix_len + len(quote)
            break
    col = src.char_col(arg.lineno, arg.col_offset)
    anchor = (arg.lineno, col, arg.lineno, col)
    return Block(call, tree, lines, max(margin, 0), first_line, first_col, exact, anchor)


def post_import_blocks(ctx: Context) -> list[Block]:
    """Every ``<config>.add_post_import_block("...")`` at module level of the file, parsed (cached)."""
    cached = ctx.memo.get("post_import_blocks")
    if cached is not None:
        return cached
    blocks: list[Block] = []
    for stmt in ctx.tree.body:
        if (
            isinstance(stmt, ast.Expr)
            and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Attribute)
            and stmt.value.func.attr == "add_post_import_block"
        ):
            block = _parse_block(ctx, stmt.value)
            if block is not None:
                blocks.append(block)
                bindings: dict[str, str] = {}
                collect_imports(block.tree.body, bindings)
                ctx.add_imports(bindings)  # the block's imports reach the generated module's scope
    ctx.memo["post_import_blocks"] = blocks
    return blocks


def block_of(ctx: Context, call: ast.Call) -> Block | None:
    return next((b for b in post_import_blocks(ctx) if b.call is call), None)


def module_scope_calls(tree: ast.Module) -> Iterator[ast.Call]:
    """Calls evaluated at import time of a (small) block: module level, not inside functions or lambdas."""
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (*_SCOPES, ast.ClassDef)):
            if isinstance(node, ast.ClassDef):
                stack.extend(node.body)
            continue
        if isinstance(node, ast.Call):
            yield node
        stack.extend(ast.iter_child_nodes(node))


# -- the handle table ------------------------------------------------------------------------------


@dataclass
class Handle:
    kind: str  # OpSlot | VeomniOp | resolve_op
    op: str | None
    variant: str | None  # VeomniOp naming (OpSlot qwen3_5 -> offset)
    call: ast.Call  # the constructor call
    block: Block | None = None  # set when declared inside a post-import block
    raw_variant: str | None = None  # the variant literal as written
    # the body (module, block or function) whose own statement binds it, when the binding is straight-line there
    # (not under an ``if``/``try``/loop): a later such binding of the same name replaces it (``scope_of``)
    scope: int | None = field(default=None, compare=False)


@dataclass
class HandleTable:
    """Dispatch handles a file declares: module globals (file or post-import blocks) and ``self.<attr>``."""

    module: dict[str, list[Handle]] = field(default_factory=dict)
    attrs: dict[tuple[str | None, str], list[Handle]] = field(default_factory=dict)
    # callables that wrap a handle (``self.lb_loss = partial(lb_loss, op=self.veomni_lb)``, a lambda calling
    # one): the wrapping expressions, judged when asked (the wrapped handle may be bound later in the walk)
    wrapper_attrs: dict[str, list[ast.expr]] = field(default_factory=dict)
    wrapper_names: dict[str, list[ast.expr]] = field(default_factory=dict)
    blocks_done: bool = False

    @staticmethod
    def _handle(call: ast.Call, block: Block | None = None, ctx: Context | None = None) -> Handle | None:
        kind = constructor_kind(call, ctx)
        if kind not in HANDLE_CONSTRUCTORS:
            return None
        op, variant = op_variant(call, kind)
        raw = str_value(call_arg(call, 1, "variant"))
        return Handle(kind, op, variant, call, block, raw)  # type: ignore[arg-type]

    def add_blocks(self, ctx: Context) -> None:
        if self.blocks_done:
            return
        self.blocks_done = True
        for block in post_import_blocks(ctx):
            for stmt in block.tree.body:
                if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call):
                    handle = self._handle(stmt.value, block, ctx)
                    if handle is not None:
                        handle.scope = id(block)
                        for target in stmt.targets:
                            if isinstance(target, ast.Name):
                                self.module.setdefault(target.id, []).append(handle)

    def visit_assign(self, ctx: Context, node: ast.Assign) -> None:
        """Feed an ``Assign`` met during the traversal."""
        self.add_blocks(ctx)
        value = node.value
        if _wrapper(ctx, value):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    self.wrapper_names.setdefault(target.id, []).append(value)
                elif self_attr(target) is not None:
                    self.wrapper_attrs.setdefault(target.attr, []).append(value)  # type: ignore[union-attr]
            return
        if not isinstance(value, ast.Call):
            return
        handle = self._handle(value, None, ctx)
        if handle is None:
            return
        func = ctx.enclosing(*_SCOPES)
        parent = ctx.parent
        if parent is (func if func is not None else ctx.tree):
            handle.scope = id(parent)
        for target in node.targets:
            if isinstance(target, ast.Name) and func is None:
                self.module.setdefault(target.id, []).append(handle)
            elif (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
                and func is not None
            ):
                self.attrs.setdefault((owner_class(ctx, func), target.attr), []).append(handle)

    def resolve(self, ctx: Context, callee: ast.expr, cls: str | None) -> Handle | None:
        """The handle a call's callee refers to, when it is unambiguous (one op and variant)."""
        self.add_blocks(ctx)
        found: list[Handle] = []
        if isinstance(callee, ast.Call):
            handle = self._handle(callee, None, ctx)
            found = [handle] if handle else []
        elif isinstance(callee, ast.Name):
            found = self.module.get(callee.id, [])
        elif (
            isinstance(callee, ast.Attribute)
            and isinstance(callee.value, ast.Name)
            and callee.value.id == "self"
        ):
            found = self.attrs.get((cls, callee.attr), [])
            if not found:
                found = [h for (c, a), hs in self.attrs.items() if a == callee.attr for h in hs]
        if not found:
            return None
        if len({(h.op, h.variant) for h in found}) != 1:
            return in_effect(found)
        return found[0]

    def is_handle(self, ctx: Context, callee: ast.expr, cls: str | None, _depth: int = 0) -> bool:
        """Whether ``callee`` is a dispatch handle of the file, or a callable bound to one
        (``functools.partial(helper, op=<handle>)``, a lambda that calls one)."""
        self.add_blocks(ctx)
        if isinstance(callee, ast.Call):
            return constructor_kind(callee, ctx) in HANDLE_CONSTRUCTORS
        wrappers: list[ast.expr] = []
        if isinstance(callee, ast.Name):
            if callee.id in self.module:
                return True
            wrappers = self.wrapper_names.get(callee.id, [])
        elif self_attr(callee) is not None:
            if any(a == callee.attr for (_c, a) in self.attrs):  # type: ignore[union-attr]
                return True
            wrappers = self.wrapper_attrs.get(callee.attr, [])  # type: ignore[union-attr]
        if _depth >= 3:
            return False
        return any(
            self.is_handle(ctx, inner, cls, _depth + 1) for wrapper in wrappers for inner in _wrapped(wrapper)
        )


def _statement_list_span(parent: ast.AST | None, stmt: ast.stmt) -> tuple[int, int]:
    """The lines of the statement list (a body, an ``else``, a handler) of ``parent`` holding ``stmt``: (first,
    last), the last negated when the list ends in a ``return``/``raise``/``continue``/``break``."""
    for _name, value in ast.iter_fields(parent) if parent is not None else ():
        if isinstance(value, list) and any(v is stmt for v in value):
            end = getattr(value[-1], "end_lineno", None) or value[-1].lineno
            if isinstance(value[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break)):
                return value[0].lineno, -end  # the list leaves its block: its bindings reach no later line
            return value[0].lineno, end
    return stmt.lineno, getattr(stmt, "end_lineno", None) or stmt.lineno


def _local_in_effect(binds: list[tuple[Handle, int, tuple[int, int]]], call: ast.Call) -> Handle | None:
    """The local binding a call sees: the last one above it in a statement list holding the call (it runs before
    the call), unless a binding between them in another branch binds another op or variant."""
    before = [(h, line, span) for h, line, span in binds if line < call.lineno]
    dominating = [b for b in before if b[2][0] <= call.lineno <= abs(b[2][1])]
    if not dominating:
        return None
    handle, line, _span = dominating[-1]
    if any(
        (h.op, h.variant) != (handle.op, handle.variant)
        for h, other, (_start, end) in before
        if other > line and end > 0  # a binding in a branch that returns never reaches the call
    ):
        return None
    return handle


def foreign_attr(
    tree: ast.Module, table: HandleTable, callee: ast.expr, handle: Handle, cls: str | None
) -> bool:
    """``self.<attr>`` called in a class of this file that neither declares ``<attr>`` nor descends (in this file)
    from the class that declared ``handle``: its handle comes from a base defined elsewhere, not from this file's
    other class with an attribute of the same name (``HandleTable.resolve`` falls back to any class's)."""
    attr = callee.attr if self_attr(callee) is not None else None  # type: ignore[union-attr]
    classes = {c.name: c for c in tree.body if isinstance(c, ast.ClassDef)}
    if attr is None or cls not in classes or (cls, attr) in table.attrs:
        return False
    owners = {c for (c, a), hs in table.attrs.items() if a == attr and any(h is handle for h in hs)}
    ancestors: set[str] = set()
    todo = [cls]
    while todo:
        node = classes.get(todo.pop())
        for base in node.bases if node is not None else ():
            name = base.id if isinstance(base, ast.Name) else getattr(base, "attr", None)
            if name and name not in ancestors:
                ancestors.add(name)
                todo.append(name)
    return not owners & ancestors


def in_effect(found: list[Handle]) -> Handle | None:
    """The binding a later call sees among several of one name: the last, when every one is a straight-line
    statement of the same body (a generated file re-declaring a module slot, an ``__init__`` re-binding
    ``self.<attr>``); None when they are alternatives (branches) or in different bodies."""
    scopes = {h.scope for h in found}
    if len(scopes) != 1 or None in scopes:
        return None
    return max(found, key=lambda h: (h.call.lineno, h.call.col_offset))


def self_attr(node: ast.AST) -> str | None:
    """``attr`` of ``self.<attr>``, else None."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


def _is_partial(ctx: Context, call: ast.Call) -> bool:
    qual = ctx.qualname(call.func) if isinstance(call.func, (ast.Name, ast.Attribute)) else None
    return (qual or "").rsplit(".", 1)[-1] == "partial" and (qual in ("functools.partial", "partial"))


def _wrapper(ctx: Context, value: ast.expr) -> bool:
    """A callable that may wrap another: ``functools.partial(...)`` or a lambda."""
    return isinstance(value, ast.Lambda) or (isinstance(value, ast.Call) and _is_partial(ctx, value))


def _wrapped(wrapper: ast.expr) -> list[ast.expr]:
    """The callables a wrapper may call: a partial's arguments (the function and the ones bound to it, such as
    ``op=<handle>``), or the callees of a lambda's calls."""
    if isinstance(wrapper, ast.Lambda):
        return [sub.func for sub in ast.walk(wrapper.body) if isinstance(sub, ast.Call)]
    assert isinstance(wrapper, ast.Call)
    return [*wrapper.args, *(k.value for k in wrapper.keywords)]


# -- the migration fix (built by the engine: ``npu_lint.fixers.dispatch``) ------------------------------------

MIGRATION_BUILDER = "npu_lint.fixers.dispatch:build_migration_fix"


def migration_available(api: ApiProfile) -> bool:
    """Whether this tree has an instance-local handle API to migrate to (VeomniOp / VeomniKernel)."""
    return api.generation is not Generation.OP_SLOT and api.has_handle


def handle_name(api: ApiProfile) -> str:
    """The handle messages name: the tree's own, or, in an OpSlot-generation tree, the migration targets."""
    if api.generation is Generation.OP_SLOT:
        return " / ".join(sorted(INSTANCE_HANDLES))
    return api.handle


def migration_needs(api: ApiProfile) -> str:
    """What the migration needs in a tree that lacks the target API ("" when the tree has it)."""
    if migration_available(api):
        return ""
    if api.generation is Generation.OP_SLOT:
        targets = ", ".join(
            f"`{p.handle}` (`{p.handle_module}`)" for p in _PROFILES if p.generation is not Generation.OP_SLOT
        )
        return (
            f"this VeOmni tree is of the OpSlot generation and defines no instance-local handle: the migration "
            f"needs a VeOmni that defines {targets.replace(', ', ' or ')}; no fix is offered"
        )
    return f"this VeOmni tree does not define `{api.handle}` (`{api.handle_module}`); no fix is offered"


def migration_fix(ctx: Context) -> Fix | None:
    """The whole-file dispatch migration, attached to every NPU201-203 finding of a file (None when the tree
    has no handle API to migrate to: the message says what is needed). The fix is deferred:
    the engine builds it once per file (libcst + astroid) when fixes are applied, and shares it between the
    findings; suppressions are the engine's, so a ``# noqa`` or per-file-ignore on one finding never removes the
    migration from the others."""
    if not migration_available(ctx.project.api):
        return None
    return Fix(
        "Migrate module-global dispatch to instance-local handles",
        (),
        Applicability.UNSAFE,
        (),
        "computed by --fix/--diff/editor actions; where a step cannot be done exactly the migration is "
        "shown as a display-only proposal instead",
        deferred=True,
        builder=MIGRATION_BUILDER,
    )


def dispatch_doc(kind: str) -> str:
    if kind in INSTANCE_HANDLES:
        return f"a `{kind}` built at import time resolves its row before the ops config is installed"
    if kind in ROW_RESOLVERS:
        return "a row resolved at import time ignores the ops config installed later"
    if kind in ATTENTION_HELPERS:
        return "an attention handle built at import time ignores the model's config"
    return {
        "OpSlot": "an `OpSlot` is bound once per process and shared by every model instance",
        "bound_kernel": "a kernel taken from a module-global slot at import time is shared by every model",
    }[kind]


# -- NPU201 -----------------------------------------------------------------------------------------


# -- NPU202 -----------------------------------------------------------------------------------------


# -- NPU203 -----------------------------------------------------------------------------------------


def _impl_expr(ctx: Context, node: ast.AST, _depth: int = 0) -> bool:
    """An expression naming a configured implementation: `*.rms_norm_implementation`, `resolve_op_impl()`, or
    a local or ``self.<attr>`` the file binds only to such expressions (``self.mode = cfg.moe_implementation``)."""
    if isinstance(node, ast.Call):
        return call_name(node) in IMPL_RESOLVERS
    dotted = ctx.dotted(node)
    if dotted is None:
        return False
    last = dotted.rsplit(".", 1)[-1]
    if last.endswith(("_implementation", "_impl", "_impl_name")) or last in ("impl", "implementation"):
        return True
    if _depth >= 2:
        return False
    values: list[ast.expr] = []
    if isinstance(node, ast.Name):
        value = local_value(ctx, node)
        values = [value] if value is not None else []
    elif self_attr(node) is not None:
        values = _self_attr_values(ctx).get(node.attr, [])  # type: ignore[union-attr]
    return bool(values) and all(_impl_expr(ctx, v, _depth + 1) for v in values)


def _self_attr_values(ctx: Context) -> dict[str, list[ast.expr]]:
    """Every value the file assigns to ``self.<attr>`` (cached per file)."""
    cached = ctx.memo.get("self_attr_values")
    if cached is None:
        found: dict[str, list[ast.expr]] = {}
        for sub in statements(ctx.tree):  # an assignment is a statement
            if isinstance(sub, ast.Assign):
                for t in sub.targets:
                    attr = self_attr(t)
                    if attr is not None:
                        found.setdefault(attr, []).append(sub.value)
        cached = ctx.memo["self_attr_values"] = found
    return cached  # type: ignore[return-value]


_FLAG_TARGET = re.compile(r"\s*(\w+)\s*=[^=]")


def _guard_flags(ctx: Context) -> frozenset[str]:
    """Names a file assigns from a dispatch guard attribute (``fused = slot.use_non_eager_impl``): a cheap text
    scan, so only those names are looked up as local flags."""
    cached = ctx.memo.get("guard_flags")
    if cached is None:
        found: set[str] = set()
        for line in ctx.source.text.splitlines():
            if ("use_" in line or "is_bound" in line) and any(attr in line for attr in GUARD_ATTRS):
                match = _FLAG_TARGET.match(line)
                if match:
                    found.add(match.group(1))
        cached = frozenset(found)
        ctx.memo["guard_flags"] = cached
    return cached  # type: ignore[return-value]


def guard_of(ctx: Context, test: ast.AST, _seen: bool = False) -> tuple[str, ast.AST | None, bool] | None:
    """(description, receiver, needs-a-check) of a dispatch guard.

    When the last item is true the guard is only reported if the receiver is a known dispatch handle (or,
    without a receiver, if the guarded code calls one).
    """
    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test = test.operand
    if isinstance(test, ast.Name) and not _seen:
        if test.id not in _guard_flags(ctx):
            return None
        value = local_value(ctx, test)  # fused = slot.use_non_eager_impl; if fused: ...
        return guard_of(ctx, value, _seen=True) if value is not None else None
    literal = literal_getattr(test)
    if literal is not None and literal[1] in GUARD_ATTRS:  # getattr(slot, "use_non_eager_impl")
        test = ast.Attribute(value=literal[0], attr=literal[1], ctx=ast.Load())
    if isinstance(test, ast.BoolOp):
        for value in test.values:
            found = guard_of(ctx, value, _seen)
            if found is not None:
                return found
        return None
    if isinstance(test, ast.Attribute) and test.attr in GUARD_ATTRS:
        # `use_non_eager_impl` is VeOmni's own word; `is_bound` / `use_eager_impl` need a known handle
        return f"`.{test.attr}`", test.value, test.attr != "use_non_eager_impl"
    if isinstance(test, ast.Attribute) and not _seen:  # `if self.veomni_mlp:`: the handle's existence
        return f"`{ctx.source.segment(test)}` (a test of whether the handle exists)", test, True
    if (
        isinstance(test, ast.Call)
        and call_name(test) == "bound_kernel"
        and isinstance(test.func, ast.Attribute)
    ):
        return "`.bound_kernel()`", test.func.value, False
    presence = _presence_receiver(test)
    if presence is not None:  # hasattr(self, "veomni_mlp"): a handle missing on the instance runs eager code
        return f"`{ctx.source.segment(test)}` (a test of whether the handle exists)", presence, True
    if isinstance(test, ast.Compare) and len(test.comparators) == 1:
        left, right = test.left, test.comparators[0]
        if (
            isinstance(test.ops[0], (ast.Is, ast.IsNot))
            and isinstance(right, ast.Constant)
            and right.value is None
        ):
            if isinstance(left, ast.Call) and call_name(left) == "bound_kernel":
                return "`.bound_kernel()`", left.func.value, False  # type: ignore[union-attr]
            held = _presence_receiver(left, getattr_only=False)
            if held is None and isinstance(
                left, ast.Name
            ):  # op = getattr(self, "veomni_x", None); if op is None
                bound = local_value(ctx, left)
                if isinstance(bound, (ast.Call, ast.Attribute)):
                    held = _presence_receiver(bound, getattr_only=False)
            if held is not None:  # getattr(self, "veomni_mlp", None) is None / self.veomni_mlp is not None
                return f"`{ctx.source.segment(test)}` (a test of whether the handle exists)", held, True
            return None
        # every implementation-name expression (a field, a resolver call, a local bound to one) is spelt with
        # "impl": a file without the word has none, and its comparisons are not guards
        if isinstance(test.ops[0], (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) and "impl" in ctx.source.text:
            for a, b in ((left, right), (right, left)):
                literal = str_value(b) is not None or (
                    isinstance(b, (ast.Tuple, ast.List, ast.Set))
                    and all(str_value(e) is not None for e in b.elts)
                )
                if literal and _impl_expr(ctx, a):
                    return "a comparison of the configured implementation name", None, True
    return None


def _presence_receiver(node: ast.AST, getattr_only: bool = True) -> ast.Attribute | None:
    """The attribute a presence test reads: ``hasattr(obj, "name")`` / ``getattr(obj, "name", None)`` give
    ``obj.name`` (the latter only compared with None, ``getattr_only`` False, as a plain ``obj.name`` is). Only
    judged a guard when ``obj.name`` is one of the file's dispatch handles."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) >= 2:
        name = str_value(node.args[1])
        wanted = ("hasattr",) if getattr_only else ("getattr",)
        if node.func.id in wanted and name is not None and name.isidentifier():
            return ast.Attribute(value=node.args[0], attr=name, ctx=ast.Load())
        return None
    if not getattr_only and isinstance(node, ast.Attribute):
        return node
    return None


# -- NPU204 -----------------------------------------------------------------------------------------

_OP_TO_FIELDS: dict[str, list[str]] = {}
for _field, _op in CONFIG_FIELD_TO_OP.items():
    _OP_TO_FIELDS.setdefault(_op, []).append(_field)
ATTENTION_FIELDS = {"_attn_implementation", "attn_implementation"}
VISION_ROPE_FIELD = "rotary_pos_emb_vision_implementation"


def op_fields(op: str, api: ApiProfile) -> list[str]:
    """The ops-config fields of ``op`` in this tree: the catalog's, and the vision RoPE field for the tree's own
    vision RoPE op when it is separate from ``rope`` (``rope_vision`` in VeomniOp / VeomniKernel trees)."""
    if op == api.vision_rope[0] and op not in _OP_TO_FIELDS:
        return [VISION_ROPE_FIELD]
    return _OP_TO_FIELDS.get(op, [])


def field_of(node: ast.AST) -> tuple[str, ast.AST] | None:
    """(config field, the node holding it) of `resolve_op_impl("<field>")` / `config.ops_config.<field>`."""
    if isinstance(node, ast.Call) and call_name(node) in IMPL_RESOLVERS:
        arg = call_arg(node, 0, "field")
        value = str_value(arg)
        return (value, arg) if value is not None and arg is not None else None
    if isinstance(node, ast.Attribute):
        if node.attr in ATTENTION_FIELDS:
            return node.attr, node
        if isinstance(node.value, ast.Attribute) and node.value.attr == "ops_config":
            return node.attr, node
    return None


_STATEMENT_FIELDS = ("body", "orelse", "finalbody", "handlers", "cases")


def local_value(ctx: Context, name: ast.Name) -> ast.expr | None:
    """The single value assigned to a local name in the enclosing function (or the module)."""
    scope = ctx.function
    key = ("local_values", id(scope) if scope is not None else 0)
    cached = ctx.memo.get(key)
    if cached is None or cached[0] is not scope:  # type: ignore[index]
        values: dict[str, list[ast.expr] | None] = {}
        stack: list[ast.AST] = list(scope.body if scope is not None else ctx.tree.body)
        while stack:  # statement lists only: assignments are statements, and expressions hold none
            node = stack.pop()
            if isinstance(node, (*_SCOPES, ast.ClassDef)):
                continue
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        found = values.setdefault(t.id, [])
                        if found is not None:
                            found.append(node.value)
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
                values[node.target.id] = None  # annotated or updated: not a single value
            for field in _STATEMENT_FIELDS:
                block = getattr(node, field, None)
                if block:
                    stack.extend(block)
        cached = (scope, values)
        ctx.memo[key] = cached
    found = cached[1].get(name.id)  # type: ignore[index]
    return found[0] if found is not None and len(found) == 1 else None


def impl_argument(call: ast.Call) -> ast.expr | None:
    return call_arg(call, 2, "impl")


# -- NPU205 -----------------------------------------------------------------------------------------


def npu_capable(rows: list[OpRow]) -> list[OpRow]:
    return [r for r in rows if r.requirement == NPU or (r.requirement == ANY and r.impl != "eager")]


def describe(rows: list[OpRow]) -> str:
    parts = []
    for r in sorted(rows, key=lambda r: (r.impl != "eager", r.impl)):
        parts.append(r.impl if r.requirement == ANY else f"{r.impl} ({r.requirement})")
    return ", ".join(dict.fromkeys(parts))


def npu_targeted(ctx: Context) -> bool:
    name = ctx.source.path.replace("\\", "/").rsplit("/", 1)[-1]
    if name.endswith("_npu_patch_gen_config.py"):
        return True
    return ctx.source.kind.generated and name.endswith("_npu.py")


# -- NPU206 -----------------------------------------------------------------------------------------


def npu_named(impl: str) -> bool:
    return impl == "npu" or impl.endswith("_npu") or impl.startswith("npu_")


def uses_torch_npu(func: ast.AST) -> bool:
    for node in ast.walk(func):
        if isinstance(node, ast.Name) and node.id == "torch_npu":
            return True
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "torch_npu" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch_npu":
            return True
    return False


class HandleCalls:
    """Calls of the file's dispatch handles, with the function they sit in. Feed ``ast.Assign`` and
    ``ast.Call`` nodes during the traversal; :meth:`resolved` pairs each call with its handle once the walk is
    over (a handle may be declared below its first use). Shared with the RMSNorm rules."""

    def __init__(self, ctx: Context, ops: frozenset[str]) -> None:
        self.ctx = ctx
        self.ops = ops
        self.table = HandleTable()
        self.calls: list[tuple[ast.Call, ast.FunctionDef | ast.AsyncFunctionDef | None, str | None]] = []
        self.locals: dict[tuple[int, str], Handle] = {}  # (function, name) -> a handle built in that function
        # (function, name) -> each binding of a local handle: the handle, and the lines of the statement list
        # holding it (a call after it within those lines runs after it)
        self.local_binds: dict[tuple[int, str], list[tuple[Handle, int, tuple[int, int]]]] = {}

    def visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.Assign):
            self.table.visit_assign(self.ctx, node)
            func = self.ctx.function
            if func is not None and isinstance(node.value, ast.Call):
                handle = HandleTable._handle(node.value, None, self.ctx)
                if handle is not None:
                    span = _statement_list_span(self.ctx.parent, node)
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            self.locals[(id(func), target.id)] = handle
                            self.local_binds.setdefault((id(func), target.id), []).append(
                                (handle, node.lineno, span)
                            )
        elif isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)):
            func = self.ctx.function
            if func is not None:
                self.calls.append((node, func, owner_class(self.ctx, func)))

    def resolved(self) -> list[tuple[ast.Call, Handle, ast.FunctionDef | ast.AsyncFunctionDef | None]]:
        return [(call, handle, func) for call, handle, func, _cls in self.resolved_in_classes()]

    def resolved_in_classes(
        self,
    ) -> list[tuple[ast.Call, Handle, ast.FunctionDef | ast.AsyncFunctionDef | None, str | None]]:
        """As :meth:`resolved`, with the class each call's function belongs to."""
        out = []
        for call, func, cls in self.calls:
            handle = None
            if isinstance(call.func, ast.Name):
                binds = self.local_binds.get((id(func), call.func.id))
                if binds:
                    handle = _local_in_effect(binds, call)
                    if handle is None:
                        continue  # bound only later, or by alternatives of another variant: unknown here
            if handle is None:
                handle = self.table.resolve(self.ctx, call.func, cls)
            if handle is not None and handle.op in self.ops:
                out.append((call, handle, func, cls))
        return out

    def where(self, handle: Handle) -> ast.AST | tuple[int, int, int, int]:
        """The handle's declaration (in a post-import block: its position in the file)."""
        return handle.block.position(handle.call) if handle.block is not None else handle.call


# -- GPU/NPU generated siblings --------------------------------------------------------------------------

_SIBLING_DEF = re.compile(r"^(?:class (\w+)|    (?:async )?def (\w+)\(|(?:async )?def (\w+)\()", re.M)


def _sibling_defs(text: str) -> list[tuple[str | None, str]]:
    """Top-level classes and functions and the methods of top-level classes, in order: (class or None, name)."""
    out: list[tuple[str | None, str]] = []
    cls: str | None = None
    for match in _SIBLING_DEF.finditer(text):
        if match.group(1):
            cls = match.group(1)
            out.append((None, cls))
        elif match.group(2):
            if cls is not None:
                out.append((cls, match.group(2)))
        else:
            cls = None
            out.append((None, match.group(3)))
    return out


def gpu_sibling_only(path: str, text: str) -> list[tuple[str | None, str, str | None]]:
    """What an NPU generated module (``generated/..._npu.py``) lacks of its GPU sibling (``..._gpu.py``): each
    class, function or method the GPU one defines and this one does not, as (class or None, name, the nearest
    definition before it in the GPU module that this one has, or None). Read as text (lines that start a
    definition), not parsed; empty for any other file or without a sibling."""
    norm = path.replace("\\", "/")
    if not norm.endswith("_npu.py") or "/generated/" not in norm:
        return []
    from npu_lint.core.safeio import read_text

    try:
        other = read_text(norm[: -len("_npu.py")] + "_gpu.py")
    except (OSError, ValueError):
        return []
    mine = set(_sibling_defs(text))
    out: list[tuple[str | None, str, str | None]] = []
    last: dict[str | None, str] = {}
    for owner, name in _sibling_defs(other):
        if (owner, name) in mine:
            last[owner] = name
        elif owner is None or (None, owner) in mine:  # a missing class is reported once, not per method
            out.append((owner, name, last.get(owner)))
    return out
