"""NPU202 handle-outside-init."""

from __future__ import annotations

import ast

from npu_lint.rules._handles import (
    ATTENTION_HELPERS,
    HANDLES,
    IMPL_RESOLVERS,
    INSTANCE_HANDLES,
    call_arg,
    call_name,
    method_name,
    migration_fix,
    migration_needs,
    owner_class,
    spec_target,
)
from npu_lint.rules.base import Context, Example, Rule

_BUILT_PER_CALL = INSTANCE_HANDLES | ATTENTION_HELPERS  # VeomniOp, VeomniKernel, attention_op, ...
_SLOTS = HANDLES - INSTANCE_HANDLES  # OpSlot: module globals the build-time binder binds


class HandleOutsideInit(Rule):
    code = "NPU202"
    name = "handle-outside-init"
    summary = "A VeomniOp handle is constructed per forward step instead of once in `__init__`."
    why = (
        "A `VeomniOp(...)` (or `attention_op()`) resolves its registry row and validates the device when it is "
        "constructed. Built in `forward`, or in a free function that runs every step (a patched "
        "`apply_rotary_pos_emb`, a loss helper), it pays a registry lookup per call, hides a configuration error "
        "until the first step, and cannot follow a per-model ops config. VeOmni's contract: handles are built "
        "in `__init__` and stored on `self`; `forward` only calls them."
        " In a tree whose own sources document the handle as interned per (op, variant, impl) (read from the "
        "handle class's docstring or its interning `__new__`; VeOmni's `VeomniOp` at 5d90dd16) a per-call "
        "construction costs a dictionary lookup and returns the same handle, so it is reported only where it "
        "can change behaviour: the op, variant or implementation comes from a value of the call (a parameter, or "
        "a local computed from one), so calls may resolve different rows; or, in a method of a module (an "
        "instance exists that could own the handle), the implementation is read from the process-wide ops "
        "config when the call runs (`resolve_op_impl(...)`, `get_ops_config()`), so the layer follows whichever "
        "ops config was installed last instead of the one it was built with. A helper whose docstring says it is "
        "interned or may be called in `forward` (`attention_op()` there) is not reported, unless the method's class "
        "has its `__init__` patched to store the helper's handle on `self` (`self.veomni_attn = attention_op()`): "
        "then the call in `forward` resolves the implementation again from whatever ops config is installed "
        "instead of calling the instance's handle. A local bound by several assignments (`impl = "
        'resolve_op_impl(...)` then `if impl == "triton": impl = "eager"`) is as fixed as its bindings. '
        "A docstring that says "
        "not to call it from `forward` makes every per-call construction a finding, citing it. Outside a tree "
        "(no docstring to read) every per-call construction is reported."
    )
    bad = (
        Example(
            """
            from torch import nn
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl


            class ToyRMSNorm(nn.Module):
                def forward(self, hidden_states):
                    rms_norm = VeomniOp("rms_norm", "standard", resolve_op_impl("rms_norm_implementation"))
                    return rms_norm(hidden_states, self.weight, eps=self.variance_epsilon)
            """,
            title="built in forward",
        ),
        Example(
            """
            from torch import nn
            from veomni.ops import VeomniOp


            def apply_rope(q, k, cos, sin):
                return VeomniOp("rope", "full", "eager")(q, k, cos, sin)


            class ToyAttention(nn.Module):
                def forward(self, q, k, cos, sin):
                    return apply_rope(q, k, cos, sin)
            """,
            title="built in a free function called by forward",
        ),
    )
    good = (
        Example(
            """
            from torch import nn
            from veomni.ops import VeomniOp
            from veomni.ops.config import resolve_op_impl


            class ToyRMSNorm(nn.Module):
                def __init__(self, hidden_size, eps=1e-6):
                    super().__init__()
                    self.variance_epsilon = eps
                    self.veomni_rms_norm = VeomniOp("rms_norm", "standard", resolve_op_impl("rms_norm_implementation"))

                def forward(self, hidden_states):
                    return self.veomni_rms_norm(hidden_states, self.weight, eps=self.variance_epsilon)
            """
        ),
        Example(
            """
            from veomni.ops import VeomniOp


            def build_rope_op(impl):
                # a builder called from __init__ is fine
                return VeomniOp("rope", "full", impl)
            """
        ),
    )
    fix_safety = (
        "The fix is the dispatch migration (`npu_lint.fixers.dispatch`), attached once per file; no separate "
        "fix is offered."
    )
    node_types = (ast.Call, ast.FunctionDef, ast.AsyncFunctionDef)
    leave_types = (ast.FunctionDef, ast.AsyncFunctionDef)

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.constructions: list[tuple[ast.Call, ast.AST]] = []
        self.slots: list[tuple[ast.Call, ast.AST]] = []  # OpSlot(...) built inside a function
        self.functions: dict[ast.AST, tuple[str | None, str | None, bool]] = {}  # func -> (cls, name, free)
        self.calls: dict[ast.AST, set[str]] = {}  # func -> names it calls ("f" or "self.m")
        self.stack: list[ast.AST] = []  # enclosing functions (innermost last)
        text = ctx.source.text
        if not any(name in text for name in _BUILT_PER_CALL | _SLOTS):
            self.node_types = ()  # every construction names one of them (finish has nothing to check)
            self.leave_types = ()

    def leave(self, node: ast.AST) -> None:
        self.stack.pop()

    def visit(self, node: ast.AST) -> None:
        ctx = self.ctx
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            cls = ctx.class_
            is_method = cls is not None and node in cls.body
            self.functions[node] = (owner_class(ctx, node), method_name(node), not is_method)
            self.stack.append(node)
            return
        assert isinstance(node, ast.Call)
        if not self.stack:
            return
        func = self.stack[-1]
        callee = node.func
        if isinstance(callee, ast.Name):
            self.calls.setdefault(func, set()).add(callee.id)
            if call_name(node, ctx) in _BUILT_PER_CALL:  # import aliases resolved
                self.constructions.append((node, func))
            elif call_name(node, ctx) in _SLOTS:
                self.slots.append((node, func))
        elif isinstance(callee, ast.Attribute):
            if callee.attr in _BUILT_PER_CALL:
                self.constructions.append((node, func))
            elif callee.attr in _SLOTS:
                self.slots.append((node, func))
            if isinstance(callee.value, ast.Name) and callee.value.id == "self":
                self.calls.setdefault(func, set()).add("self." + callee.attr)

    def finish(self) -> None:
        for call, func in self.slots:
            name = call_name(call, self.ctx)
            self.report(
                call,
                f"`{name}(...)` is constructed inside `{method_name(func)}`: the build-time binder binds the "
                f"module's `{name}` globals only, so this one is never bound (`use_non_eager_impl` stays False, the "
                "fused kernel is never used) and a new one is built every call; declare it at module scope as the "
                "other slots are, or build a handle in `__init__`",
            )
        if not self.constructions:
            return
        per_step: set[ast.AST] = set()
        by_name: dict[str, list[ast.AST]] = {}
        for func, (_cls, name, free) in self.functions.items():
            if name == "forward":
                per_step.add(func)
            if name and spec_target(func)[0] is None and spec_target(func)[1] == name:
                per_step.add(func)  # replace_function: an upstream function called per step
            if free and name:
                by_name.setdefault(name, []).append(func)
        methods: dict[tuple[str | None, str | None], list[ast.AST]] = {}
        for func, (cls, name, free) in self.functions.items():
            if not free or spec_target(func)[0] is not None:
                methods.setdefault((cls, name), []).append(func)
        frontier = list(per_step)
        while frontier:
            func = frontier.pop()
            cls = self.functions.get(func, (None, None, True))[0]
            for called in self.calls.get(func, ()):
                if called.startswith("self."):
                    targets = methods.get((cls, called[5:]), [])
                else:
                    targets = by_name.get(called, [])
                for target in targets:
                    if target not in per_step and method_name(target) != "__init__":
                        per_step.add(target)
                        frontier.append(target)
        api = self.ctx.project.api
        for call, func in self.constructions:
            if func not in per_step or method_name(func) == "__init__":
                continue
            where = (
                "`forward`"
                if method_name(func) == "forward"
                else f"`{method_name(func)}`, which runs every step"
            )
            name = call_name(call, self.ctx)
            how = self._how(call, func, name)
            if how is None:
                continue  # interned per triple and built from fixed arguments: the same handle every call
            needs = migration_needs(api)
            message = (
                f"`{name}(...)` is constructed in {where}{how}: build the handle once in `__init__`, "
                "store it on `self`, and call it in `forward`" + (f" ({needs})" if needs else "")
            )
            self.report(call, message, migration_fix(self.ctx))

    def _init_handle(self, func: ast.AST, name: str | None) -> tuple[str, str, int] | None:
        """(class, attribute, line) where the `__init__` of the class ``func`` is a method of (its own, or a spec's
        patch of it in this file) stores a handle built by the same helper (`self.veomni_attn = attention_op()`)."""
        if name is None or not self._is_method(func):
            return None
        cls = self.functions[func][0]
        if cls is None:
            return None
        for other, (owner, _name, _free) in self.functions.items():
            if owner != cls or method_name(other) != "__init__":
                continue
            for node in ast.walk(other):
                if (
                    isinstance(node, ast.Assign)
                    and isinstance(node.value, ast.Call)
                    and call_name(node.value, self.ctx) == name
                ):
                    for target in node.targets:
                        if (
                            isinstance(target, ast.Attribute)
                            and isinstance(target.value, ast.Name)
                            and target.value.id == "self"
                        ):
                            return cls, target.attr, node.lineno
        return None

    def _is_method(self, func: ast.AST) -> bool:
        """A method of a class (its own, or the one a patch spec's function replaces a method of): an instance
        exists that could own the handle."""
        _cls, name, free = self.functions.get(func, (None, None, True))
        if not free or spec_target(func)[0] is not None:
            return name != "__init__"
        return False

    def _how(self, call: ast.Call, func: ast.AST, name: str | None) -> str | None:
        """How a per-call construction can change behaviour ("" when the tree does not document its handles as
        interned: every per-call construction is reported), or None when it cannot (the tree interns handles
        per (op, variant, impl) and the arguments are the same on every call)."""
        api = self.ctx.project.api
        if api.forward_forbidden:
            return f" although the tree's docstring forbids it ({api.forward_forbidden})"
        if api.interned_by is None:
            return ""
        if name in api.per_call_helpers:
            # the tree documents the helper as interned and callable from forward, where no instance keeps the
            # handle; a method of a class whose `__init__` (patched here) already stores one is not that case
            built = self._init_handle(func, name)
            if built is None:
                return None
            cls, attr, line = built
            return (
                f" although `{cls}.__init__` (line {line}) already stores its handle as `self.{attr}`: the call "
                f"here resolves the implementation from the ops config installed when it runs, not the one the "
                f"model was built with (call `self.{attr}`)"
            )
        if name not in INSTANCE_HANDLES:
            return ""
        varying = [
            (label, arg)
            for label, arg in (
                ("op", call_arg(call, 0, "op")),
                ("variant", call_arg(call, 1, "variant")),
                ("implementation", call_arg(call, 2, "impl")),
            )
            if arg is not None and not _fixed(arg, func, self.ctx)
        ]
        if not varying:
            if self._is_method(func):
                read = next(
                    (
                        arg
                        for arg in (
                            call_arg(call, 2, "impl"),
                            call_arg(call, 0, "op"),
                            call_arg(call, 1, "variant"),
                        )
                        if arg is not None and _reads_installed_config(arg, func)
                    ),
                    None,
                )
                if read is not None:
                    return (
                        f" with the implementation from `{self.ctx.source.segment(read)}`, read from the ops config "
                        "installed when the call runs: a model whose instance owns the handle keeps the row it was "
                        "built with, this one follows whichever ops config was installed last"
                    )
            return None
        shown = ", ".join(f"the {label} from `{self.ctx.source.segment(arg)}`" for label, arg in varying)
        return (
            f" with {shown}, a value of this call: {api.interned_by} interns one handle per (op, variant, impl), "
            "so each call may resolve a different registry row than the model was built with"
        )


_CONFIG_GETTERS = frozenset({"get_ops_config"})


def _reads_installed_config(node: ast.AST, func: ast.AST, depth: int = 0) -> bool:
    """Whether a value reads the process-wide ops config when it is evaluated: ``resolve_op_impl("<field>")``,
    ``get_ops_config().<field>``, or a local bound once to such a value (through conditionals on it)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and call_name(sub) in (IMPL_RESOLVERS | _CONFIG_GETTERS):
            return True
        if isinstance(sub, ast.Name) and depth < 4 and sub.id not in _params(func):
            values = _bindings(func, sub.id)
            if values and any(_reads_installed_config(v, func, depth + 1) for v in values):
                return True  # some binding reads it: the local follows the installed config
    return False


def _params(func: ast.AST) -> set[str]:
    args = getattr(func, "args", None)
    if args is None:
        return set()
    names = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
    names.update(a.arg for a in (args.vararg, args.kwarg) if a is not None)
    return names


def _bindings(func: ast.AST, name: str) -> list[ast.expr] | None:
    """The values a function's plain assignments bind to local ``name`` (``name = v``, in any branch), or None when
    it is also bound otherwise (a loop target, an augmented or annotated assignment, a walrus, an unpacking), so
    its values cannot all be read."""
    values: list[ast.expr] = []
    for sub in ast.walk(func):
        if isinstance(sub, ast.Assign):
            for target in sub.targets:
                if isinstance(target, ast.Name) and target.id == name:
                    values.append(sub.value)
                elif not isinstance(target, ast.Name) and any(
                    isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
                    for n in ast.walk(target)
                ):
                    return None
        else:
            if isinstance(sub, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor, ast.NamedExpr)):
                stores = [sub.target]
            elif isinstance(sub, (ast.With, ast.AsyncWith)):
                stores = [item.optional_vars for item in sub.items if item.optional_vars is not None]
            else:
                continue
            if any(isinstance(n, ast.Name) and n.id == name for store in stores for n in ast.walk(store)):
                return None
    return values


def _fixed(node: ast.AST, func: ast.AST, ctx: Context, depth: int = 0) -> bool:
    """Whether an argument is the same on every call: a literal, the ops-config resolver with literal
    arguments, an attribute of `self`, a module-level name, or a local bound once to one of these."""
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Call):
        return call_name(node) in IMPL_RESOLVERS and all(
            isinstance(a, ast.Constant) for a in (*node.args, *(k.value for k in node.keywords))
        )
    if isinstance(node, ast.Attribute):
        root: ast.AST = node
        while isinstance(root, ast.Attribute):
            root = root.value
        return isinstance(root, ast.Name) and root.id == "self"
    if isinstance(node, ast.Name):
        if node.id in _params(func):
            return False
        values = _bindings(func, node.id)
        if values is None:
            return False  # bound by a loop, an augmented assignment, a walrus...: may change per call
        if not values:
            return True  # a module-level name
        # every binding fixed (`impl = resolve_op_impl("f")` then `if impl == "triton": impl = "eager"`): the
        # local is one of a few values fixed per call site, the same on every call
        return depth < 4 and all(_fixed(v, func, ctx, depth + 1) for v in values)
    if isinstance(node, (ast.IfExp, ast.Compare, ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.JoinedStr)):
        # `"eager" if impl == "triton" else impl`: fixed when every operand is
        return all(
            _fixed(child, func, ctx, depth + 1)
            for child in ast.iter_child_nodes(node)
            if isinstance(child, ast.expr)
        )
    if isinstance(node, ast.FormattedValue):
        return _fixed(node.value, func, ctx, depth + 1)
    return False
