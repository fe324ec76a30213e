"""The SP-state flow of the functions of a file, shared by NPU717 and NPU718 (built once per function)."""

from __future__ import annotations

import ast

from npu_lint.core.memo import by_content
from npu_lint.rules.base import Context
from npu_lint.veomni.spstate import Flow, flow, mentions_sp


def function_flow(ctx: Context, func: ast.FunctionDef | ast.AsyncFunctionDef) -> Flow | None:
    """The function's SP-state flow, or None when its own lines call no SP transition (the cheap pre-check)."""
    key = ("npu7-spflow", id(func))
    if key in ctx.memo:
        return ctx.memo[key]  # type: ignore[return-value]
    lines = ctx.source.lines[func.lineno - 1 : func.end_lineno or func.lineno]
    # the flow reads the function's subtree alone: a generated NPU file's copy of a GPU function reuses it
    result = by_content(flow, func, ctx.source.lines) if mentions_sp("\n".join(lines)) else None
    if result is not None and not result.transitions:
        result = None
    ctx.memo[key] = result
    return result
