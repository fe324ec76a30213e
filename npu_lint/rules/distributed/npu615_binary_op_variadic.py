"""NPU615 binary-op-variadic."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule

# element-wise ops of exactly two tensors (``torch.max``/``torch.min`` take (input, other) or (input, dim))
_BINARY = frozenset({"maximum", "minimum", "fmax", "fmin", "max", "min"})
_STRICT = frozenset({"maximum", "minimum", "fmax", "fmin"})


class BinaryOpVariadic(Rule):
    code = "NPU615"
    name = "binary-op-variadic"
    summary = (
        "`torch.maximum` / `torch.minimum` / `torch.fmax` / `torch.fmin` (or `torch.max` / `torch.min` in their "
        "two-tensor form) gets a starred argument or more than two tensors: the op combines exactly two."
    )
    why = (
        "Combining per-group partial results (the inf-norm of gradients sharded over data, expert and other "
        "parallel groups, the largest loss scale, the longest sequence) needs a maximum over a variable number "
        "of tensors. The element-wise ops take exactly two: `torch.maximum(a, *others)` works while there is "
        "one other group and raises a `TypeError` as soon as a second parallel axis (or a replicated bucket) "
        "adds a partial norm, which happens only on the larger multi-axis runs; `torch.max(a, *others)` binds "
        "the second tensor as `dim`. Fold the values pairwise (a loop, or `functools.reduce(torch.maximum, "
        "...)`) or stack them and reduce (`torch.stack([...]).amax(0)`)."
    )
    bad = (
        Example(
            """
            import torch


            def total_inf_norm(local_norm, group_norms):
                return torch.maximum(local_norm, *group_norms.values())
            """,
            path="veomni/distributed/toy_clip.py",
            title="a starred argument: one partial norm per parallel group",
        ),
        Example(
            """
            from torch import fmax


            def widest(dp_max, ep_max, pp_max):
                return fmax(dp_max, ep_max, pp_max)
            """,
            path="veomni/optim/toy_scale.py",
            title="three tensors to an imported binary op",
        ),
        Example(
            """
            import torch


            def running_max(first, rest):
                return first.maximum(*rest)
            """,
            path="veomni/utils/toy_stats.py",
            title="the method form with a starred argument",
        ),
    )
    good = (
        Example(
            """
            import functools

            import torch


            def total_inf_norm(local_norm, group_norms):
                out = functools.reduce(torch.maximum, group_norms.values(), local_norm)
                stacked = torch.stack([local_norm, *group_norms.values()]).amax(0)
                return torch.maximum(out, stacked), torch.max(out, dim=0), torch.max(out)
            """,
            path="veomni/distributed/toy_clip.py",
            title="folded pairwise, or stacked and reduced",
        ),
    )
    fix_safety = "No fix: whether to fold pairwise or stack and reduce is a judgement."
    requires = (("maximum(", "minimum(", "fmax(", "fmin(", "max(", "min("),)
    node_types = (ast.Call,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Call)
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in _STRICT:
            qual = self.ctx.qualname(func) or ""
            if qual == f"torch.{func.attr}":
                self._check(node, qual, func.attr, node.args, 2)
            elif isinstance(func.value, ast.Name) and func.value.id not in self.ctx.imports:
                # the tensor method form: ``a.maximum(*rest)`` (the receiver is the first tensor)
                self._check(node, f"{func.value.id}.{func.attr}", func.attr, node.args, 1)
        elif isinstance(func, ast.Attribute) and func.attr in _BINARY:
            qual = self.ctx.qualname(func) or ""
            if qual == f"torch.{func.attr}" and any(isinstance(a, ast.Starred) for a in node.args):
                self._check(node, qual, func.attr, node.args, 2)
        elif isinstance(func, ast.Name) and func.id in _STRICT:
            qual = self.ctx.qualname(func) or ""
            if qual == f"torch.{func.id}":
                self._check(node, func.id, func.id, node.args, 2)

    def _check(self, node: ast.Call, shown: str, op: str, args: list[ast.expr], arity: int) -> None:
        starred = [a for a in args if isinstance(a, ast.Starred)]
        if starred:
            what = f"a starred argument (`{ast.unparse(starred[0])}`)"
        elif len(args) > arity:
            what = f"{len(args)} tensors"
        else:
            return
        self.report(
            node,
            f"`{shown}` combines exactly two tensors but gets {what}: with more (or fewer) values than that it "
            f"raises, or binds a tensor to another parameter; fold pairwise (`functools.reduce(torch.{op}, ...)`) "
            "or stack and reduce",
        )
