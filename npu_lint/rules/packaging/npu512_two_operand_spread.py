"""NPU512 two-operand-spread."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import call_name
from npu_lint.rules.base import Context, Example, Rule

# torch functions that take exactly two tensor operands (plus keyword options); the element-wise maxima and minima
# (`maximum`, `minimum`, `fmax`, `fmin`) are NPU615's, which reads them as the distributed reductions they are
TWO_OPERANDS = frozenset(
    {
        "hypot",
        "atan2",
        "logaddexp",
        "logaddexp2",
        "eq",
        "ne",
        "ge",
        "gt",
        "le",
        "lt",
        "equal",
        "dist",
        "remainder",
        "fmod",
        "true_divide",
        "floor_divide",
        "bitwise_and",
        "bitwise_or",
        "bitwise_xor",
        "logical_and",
        "logical_or",
        "logical_xor",
    }
)


class TwoOperandSpread(Rule):
    code = "NPU512"
    name = "two-operand-spread"
    summary = (
        "A torch function of exactly two tensors (`torch.logical_or`, `torch.hypot`, `torch.eq`, ...) "
        "is called with more than two operands or with a spread of many."
    )
    why = (
        "Reductions over a variable number of partial results (per-group norms, per-mesh maxima) are easy to "
        "write as `torch.logical_or(a, *rest)`: the call works while there is one group and raises `TypeError` "
        "as soon as a second one exists, typically only on the larger NPU clusters that enable expert or extra "
        "parallelism. Fold pairwise (a loop, `functools.reduce`) or stack and reduce (`torch.stack(...).amax(0)`)."
    )
    bad = (
        Example(
            """
            import torch


            def any_nonfinite(local, per_group):
                return torch.logical_or(local, *per_group.values())
            """,
            title="a spread that holds one value only for one group",
        ),
        Example(
            """
            import torch


            def any_overflow(a, b, c):
                return torch.logical_or(a, b, c)
            """,
            title="three operands (the third is taken as `out=` positionally and rejected)",
        ),
    )
    good = (
        Example(
            """
            import functools

            import torch


            def any_nonfinite(local, per_group):
                return functools.reduce(torch.logical_or, per_group.values(), local)
            """
        ),
    )
    node_types = (ast.Call,)
    requires = ("torch",)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Call)
        func = node.func
        leaf = call_name(node)
        if leaf not in TWO_OPERANDS or self.ctx.qualname(func) != f"torch.{leaf}":
            return
        starred = [a for a in node.args if isinstance(a, ast.Starred)]
        plain = len(node.args) - len(starred)
        if plain > 2:
            self.report(
                node.args[2],
                f"`torch.{leaf}` takes exactly two tensors; this call passes {plain}: it raises TypeError",
            )
        elif starred and len(node.args) > 1:
            self.report(
                starred[0],
                f"`torch.{leaf}` takes exactly two tensors; spreading a collection into it only works while "
                "the collection holds exactly the missing operand: fold pairwise instead",
            )
