"""NPU202 handle-outside-init."""

from __future__ import annotations

import ast

from npu_lint.rules._handles import (
    ATTENTION_HELPERS,
    INSTANCE_HANDLES,
    call_name,
    method_name,
    migration_fix,
    migration_needs,
    owner_class,
    spec_target,
)
from npu_lint.rules.base import Context, Example, Rule

_BUILT_PER_CALL = INSTANCE_HANDLES | ATTENTION_HELPERS  # VeomniOp, VeomniKernel, attention_op, ...


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
        self.functions: dict[ast.AST, tuple[str | None, str | None, bool]] = {}  # func -> (cls, name, free)
        self.calls: dict[ast.AST, set[str]] = {}  # func -> names it calls ("f" or "self.m")
        self.stack: list[ast.AST] = []  # enclosing functions (innermost last)
        text = ctx.source.text
        if not any(name in text for name in _BUILT_PER_CALL):
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
        elif isinstance(callee, ast.Attribute):
            if callee.attr in _BUILT_PER_CALL:
                self.constructions.append((node, func))
            if isinstance(callee.value, ast.Name) and callee.value.id == "self":
                self.calls.setdefault(func, set()).add("self." + callee.attr)

    def finish(self) -> None:
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
        for call, func in self.constructions:
            if func not in per_step or method_name(func) == "__init__":
                continue
            where = (
                "`forward`"
                if method_name(func) == "forward"
                else f"`{method_name(func)}`, which runs every step"
            )
            needs = migration_needs(self.ctx.project.api)
            message = (
                f"`{call_name(call, self.ctx)}(...)` is constructed in {where}: build the handle once in `__init__`, "
                "store it on `self`, and call it in `forward`" + (f" ({needs})" if needs else "")
            )
            self.report(call, message, migration_fix(self.ctx))
