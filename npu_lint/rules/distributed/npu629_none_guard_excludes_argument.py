"""NPU629 none-guard-excludes-argument."""

from __future__ import annotations

import ast
import builtins

from npu_lint.core.astutil import call_name, nodes_of, none_tested
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.parallelgate import conjuncts

_PLAIN = frozenset(dir(builtins)) | {
    "append",
    "extend",
    "get",
    "setdefault",
    "update",
    "pop",
    "add",
    "format",
}


def _passes(call: ast.Call, name: str) -> bool:
    called = call_name(call)
    if called in _PLAIN or called.startswith(("log", "warn", "info", "debug", "print")):
        return False  # storing, printing or logging the None is no dispatch
    values = [*call.args, *(k.value for k in call.keywords if k.arg is not None)]
    return any(isinstance(v, ast.Name) and v.id == name for v in values)


def _rebinds(stmt: ast.stmt, name: str) -> bool:
    return any(
        isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load)
        for n in nodes_of(stmt, ast.Name)
    )


class NoneGuardExcludesArgument(Rule):
    code = "NPU629"
    name = "none-guard-excludes-argument"
    summary = (
        "A branch taken only when an optional argument is None (`if groups is None and ep_aware(model):`) "
        "hands that argument on to the callee it guards, which therefore accepts it."
    )
    why = (
        "The parallel-aware builders of a training stack (the EP/FSDP2-aware optimizer, a sharded loader, a "
        "parallel wrapper) take the same optional arguments as the plain path: custom parameter groups, a "
        "weights path, a plan. A dispatch that adds `x is None` to the condition that selects the aware "
        "builder, and still passes `x` to it, says two things at once: the builder handles `x`, and it is never "
        "given one. Every caller that passes `x` (the VLM trainer always passes its ViT / LLM parameter groups) "
        "silently falls back to the plain path: expert-parallel DTensors on their own mesh share one plain "
        "optimizer step and one gradient norm with the FSDP ones, which fails on mixed meshes or mis-scales "
        "the experts. The check reads every `if` whose `and` chain tests `x is None` next to another condition "
        "and whose body passes the name `x` to a call (not a print or log, and not in a statement that "
        "rebinds `x`, which fills the None in) before rebinding it."
    )
    bad = (
        Example(
            """
            def build_optimizer(model, lr, param_groups=None):
                if param_groups is None and _is_ep_model(model):
                    return build_ep_fsdp2_optimizer(model, lr, param_groups)
                return AdamW(param_groups or model.parameters(), lr)
            """,
            path="veomni/optim/optimizer.py",
            title="the EP-aware optimizer is skipped whenever parameter groups are given",
        ),
    )
    good = (
        Example(
            """
            def build_optimizer(model, lr, param_groups=None):
                if _is_ep_model(model):
                    return build_ep_fsdp2_optimizer(model, lr, param_groups)
                if param_groups is None and lr > 0:
                    param_groups = default_groups(model)
                return AdamW(param_groups, lr)
            """,
            path="veomni/optim/optimizer.py",
        ),
    )
    fix_safety = "No fix: whether the callee handles the argument is for the author to confirm."

    requires = ("is None", " and ")
    node_types = (ast.If,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.If)
        parts = conjuncts(node.test)
        if len(parts) < 2:
            return
        for part in parts:
            name = none_tested(part)
            if name is None:
                continue
            for stmt in node.body:
                if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and _rebinds(stmt, name):
                    break  # `x = default_for(model, x)`: the branch fills the None in, it dispatches nothing
                call = next(
                    (c for c in nodes_of(stmt, ast.Call) if _passes(c, name)),  # type: ignore[arg-type]
                    None,
                )
                if call is not None:
                    assert isinstance(call, ast.Call)
                    callee = ast.unparse(call.func)
                    self.report(
                        part,
                        f"this branch runs only when `{name}` is None, yet it passes `{name}` on to `{callee}`, "
                        f"which accepts it: every caller that gives `{name}` falls back to the other path",
                    )
                    break
                if _rebinds(stmt, name):
                    break
