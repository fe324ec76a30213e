"""NPU203 guarded-dispatch."""

from __future__ import annotations

import ast

from npu_lint.rules._handles import (
    HandleTable,
    call_name,
    guard_of,
    handle_name,
    migration_fix,
    migration_needs,
    owner_class,
)
from npu_lint.rules.base import Context, Example, Rule


class GuardedDispatch(Rule):
    code = "NPU203"
    name = "guarded-dispatch"
    summary = "A dispatch call is guarded (`use_non_eager_impl`, `bound_kernel()`, impl-name test) with an eager fallback."
    why = (
        "The OpSlot generation calls the fused kernel only when a slot is bound (`if slot.use_non_eager_impl: "
        "return slot(...)`) and otherwise falls through to a copy of the eager code. Two code paths per op drift "
        "apart, and a kernel that fails to bind silently runs eager. A VeomniOp handle is called "
        "unconditionally: the registry's `eager` row is the fallback, and an impossible selection fails loudly at "
        "construction."
    )
    bad = (
        Example(
            """
            import torch
            from veomni.ops.dispatch import OpSlot

            veomni_rms_norm = OpSlot("rms_norm", "standard")


            def toy_rmsnorm_forward(self, hidden_states):
                if veomni_rms_norm.use_non_eager_impl:
                    return veomni_rms_norm(hidden_states, self.weight, self.variance_epsilon)
                variance = hidden_states.pow(2).mean(-1, keepdim=True)
                return self.weight * hidden_states * torch.rsqrt(variance + self.variance_epsilon)
            """,
            title="the OpSlot guard",
        ),
        Example(
            """
            from torch import nn
            from veomni.ops import VeomniOp


            class ToyMLP(nn.Module):
                def __init__(self, config):
                    super().__init__()
                    self.impl = config.ops_config.swiglu_mlp_implementation
                    self.veomni_swiglu = VeomniOp("swiglu_mlp", "standard", self.impl)

                def forward(self, x):
                    if self.impl != "eager":
                        return self.veomni_swiglu(x, self.gate_w, None, self.up_w, None, self.down_w, None)
                    return self.down(self.act(self.gate(x)) * self.up(x))
            """,
            title="a test of the implementation name",
        ),
    )
    good = (
        Example(
            """
            from torch import nn


            class ToyRMSNorm(nn.Module):
                def forward(self, hidden_states):
                    return self.veomni_rms_norm(hidden_states, self.weight, eps=self.variance_epsilon)
            """
        ),
        Example(
            """
            def attention(config, query):
                # Hugging Face's own attention switch is not a VeOmni dispatch guard
                if config._attn_implementation != "eager":
                    return query * 2
                return query
            """
        ),
    )
    fix_safety = (
        "The fix is the dispatch migration (`npu_lint.fixers.dispatch`), attached once per file: it replaces the "
        "guard and its eager copy by an unconditional handle call."
    )
    node_types = (ast.If, ast.IfExp, ast.BoolOp, ast.Assign)

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.handles = HandleTable()
        # (report node, guarded region, what, class, guard receiver): judged once the handles are known
        self.pending: list[tuple[ast.AST, ast.AST, str, str | None, ast.AST | None]] = []

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
                    self._report(node, "`.bound_kernel() or <eager fallback>`")
            return
        test = node.test  # type: ignore[attr-defined]
        guard = guard_of(ctx, test)
        if guard is None:
            return
        what, receiver, needs_check = guard
        if isinstance(node, ast.If):
            has_fallback = bool(node.orelse) or self._falls_through(node)
        else:
            has_fallback = True
        if not has_fallback:
            return
        if needs_check:
            self.pending.append((test, node, what, owner_class(ctx, ctx.function), receiver))
            return
        self._report(test, what)

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

    def finish(self) -> None:
        for test, region, what, cls, receiver in self.pending:
            if receiver is not None:
                if self.handles.is_handle(self.ctx, receiver, cls):  # type: ignore[arg-type]
                    self._report(test, what)
                continue
            for sub in ast.walk(region):
                if isinstance(sub, ast.Call) and self.handles.is_handle(self.ctx, sub.func, cls):
                    self._report(test, what)
                    break

    def _report(self, node: ast.AST, what: str) -> None:
        api = self.ctx.project.api
        needs = migration_needs(api)
        message = (
            f"dispatch guarded by {what} with an eager fallback: call the {handle_name(api)} handle "
            "unconditionally (the registry's eager row is the fallback)" + (f"; {needs}" if needs else "")
        )
        self.report(node, message, migration_fix(self.ctx))
