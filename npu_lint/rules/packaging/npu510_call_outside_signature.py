"""NPU510 call-outside-signature."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.packaging._calls import callee, confirmed


class CallOutsideSignature(Rule):
    code = "NPU510"
    name = "call-outside-signature"
    summary = (
        "A call to one of the tree's own functions or classes passes a keyword its signature does not have, "
        "more positional arguments than it takes, leaves out a parameter without a default, or passes "
        "two variables named like two of its parameters each in the other's place."
    )
    why = (
        "Helpers, wrappers and model classes of a VeOmni tree change their parameters between releases (a "
        "flag renamed, an argument moved into a config); a caller left on the old spelling raises `TypeError` "
        "the first time the path runs, which on an NPU port is often a code path GPU CI never took (an NPU "
        "branch, a generated `_npu` module, a fallback). The callee is resolved statically in the tree being "
        "linted (the file's own top-level definitions, `self.` methods of its class, and names it imports from "
        "the tree, followed through re-exports); its own `def` (or its `__init__`, or a plain dataclass's "
        "fields) is the truth: a parameter without a default that no argument fills, or two arguments named "
        "exactly like two of the callee's parameters handed in each other's place (a swap no caller means; a "
        "`backward` reversing its forward's axes and a recursive call are left alone), is reported. Callees "
        "with `**kwargs`/`*args`, unknown decorators, metaclasses or bases outside the tree are never judged."
    )
    bad = (
        Example(
            """
            def shard_sizes(total, world_size, *, pad_to_multiple=1):
                return [total // world_size] * world_size


            def plan(total, world):
                return shard_sizes(total, world, pad_multiple=8)
            """,
            title="a keyword the helper renamed",
        ),
        Example(
            """
            class RankSlicer:
                def __init__(self, group, dim):
                    self.group = group
                    self.dim = dim


            def build(group):
                return RankSlicer(group, 1, True)
            """,
            title="one positional argument more than `__init__` takes",
        ),
        Example(
            """
            class Gate:
                def route(self, scores, top_k):
                    return scores.topk(top_k)

                def forward(self, scores):
                    return self.route(scores, k=2)
            """,
            title="a method of the same class, by `self.`",
        ),
        Example(
            """
            def slice_tokens(tensor, seq_range, dim):
                return tensor.narrow(dim, seq_range[0], seq_range[1] - seq_range[0])


            def local_chunk(hidden_states, seq_range):
                return slice_tokens(hidden_states, seq_range)
            """,
            title="a parameter without a default left out",
        ),
        Example(
            """
            def keep_input_only(multimodal_config, multimodal_output_mask):
                return {k: v for k, v in multimodal_config.items() if not multimodal_output_mask.get(k)}


            def build(multimodal_config, multimodal_output_mask):
                return keep_input_only(multimodal_output_mask, multimodal_config)
            """,
            title="two arguments named like the callee's parameters, each in the other's place",
        ),
    )
    good = (
        Example(
            """
            def shard_sizes(total, world_size, **options):
                return [total // world_size] * world_size


            def plan(total, world):
                return shard_sizes(total, world, pad_multiple=8)  # **options takes it
            """
        ),
        Example(
            """
            from dataclasses import dataclass


            @dataclass
            class Plan:
                world: int
                pad: int = 1


            def build():
                return Plan(world=8, pad=2)
            """
        ),
        Example(
            """
            def all_to_all(x, scatter_dim, gather_dim, group):
                return x


            class SeqToHeads:
                @staticmethod
                def backward(ctx, grad, scatter_dim, gather_dim, group):
                    return all_to_all(grad, gather_dim, scatter_dim, group)  # the adjoint reverses them
            """
        ),
    )
    node_types = (ast.Call,)
    requires = ("(",)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Call)
        found = callee(self.ctx, node)
        if found is None:
            return
        sig = found.sig
        bad = [kw for kw in node.keywords if kw.arg is not None and not sig.accepts_keyword(kw.arg)]
        limit = sig.max_positional()
        starred = any(isinstance(a, ast.Starred) for a in node.args)
        spread = any(kw.arg is None for kw in node.keywords)
        too_many = limit is not None and not starred and len(node.args) > limit
        missing = (
            []
            if starred or spread or bad or too_many
            else sig.missing(len(node.args), {kw.arg for kw in node.keywords if kw.arg})
        )
        misplaced = [] if starred or bad or too_many else self._misplaced(node, sig.positional)
        if not (bad or too_many or missing or misplaced) or not confirmed(self.ctx, node, found):
            return
        what = f"{found.label}'s `__init__`" if sig.kind == "class" else found.label
        for kw in bad:
            self.report(
                kw,
                f"{what} ({found.where}) has no parameter `{kw.arg}` and takes no `**kwargs`: this call "
                "raises TypeError",
            )
        if too_many:
            assert limit is not None
            self.report(
                node.args[limit],
                f"{what} ({found.where}) takes {limit} positional argument{'s' if limit != 1 else ''}, "
                f"this call passes {len(node.args)}: it raises TypeError",
            )
        if missing:
            names = ", ".join(f"`{m}`" for m in missing)
            self.report(
                node,
                f"{what} ({found.where}) requires {names}, which this call does not pass: it raises TypeError",
            )
        for arg, slot, named in misplaced[:1]:
            self.report(
                arg,
                f"`{named}` is passed in the place of {what}'s parameter `{slot}` ({found.where}), while the "
                f"callee has its own parameter `{named}` at another position: the arguments look swapped",
            )

    def _misplaced(self, node: ast.Call, params: tuple[str, ...]) -> list[tuple[ast.expr, str, str]]:
        """Positional arguments that are plain names of another of the callee's parameters, each in the other's
        place (``f(b, a)`` for ``def f(a, b)``). A name passed where another parameter is meant
        (``Norm(quant_channels, in_channels)`` for ``def __init__(self, in_channels, out_channels)``) is a
        caller's choice and not judged; a recursive call
        (``gcd(b, a % b)``) and a ``backward`` (which hands its forward's arguments back in reverse) are left
        alone."""
        func = self.ctx.function
        if func is not None and func.name == "backward":
            return []
        callee_name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
        if func is not None and callee_name == func.name:
            return []
        where = {name: i for i, name in enumerate(params)}
        passed = {kw.arg for kw in node.keywords}
        out: list[tuple[ast.expr, str, str]] = []
        for i, arg in enumerate(node.args[: len(params)]):
            if not isinstance(arg, ast.Name) or arg.id == params[i]:
                continue
            j = where.get(arg.id)
            if j is None or j == i or arg.id in passed:
                continue
            other = node.args[j] if j < len(node.args) else None
            if isinstance(other, ast.Name) and other.id == params[i]:  # each in the other's place
                out.append((arg, params[i], arg.id))
        return out
