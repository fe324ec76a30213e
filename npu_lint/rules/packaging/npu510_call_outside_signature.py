"""NPU510 call-outside-signature."""

from __future__ import annotations

import ast

from npu_lint.rules._calls import callee, confirmed
from npu_lint.rules.base import Context, Example, Rule


class CallOutsideSignature(Rule):
    code = "NPU510"
    name = "call-outside-signature"
    summary = (
        "A call to one of the tree's own functions or classes passes a keyword its signature does not have, "
        "or more positional arguments than it takes, or leaves out a parameter it requires."
    )
    why = (
        "Helpers, wrappers and model classes of a VeOmni tree change their parameters between releases (a "
        "flag renamed, an argument moved into a config); a caller left on the old spelling raises `TypeError` "
        "the first time the path runs, which on an NPU port is often a code path GPU CI never took (an NPU "
        "branch, a generated `_npu` module, a fallback). The callee is resolved statically in the tree being "
        "linted (the file's own top-level definitions, `self.` methods of its class, and names it imports from "
        "the tree, followed through re-exports); its own `def` (or its `__init__`, or a plain dataclass's "
        "fields) is the truth. Callees with `**kwargs`/`*args`, unknown decorators, metaclasses or bases "
        "outside the tree are never judged, nor a def rebound at module level (`f = wrap(f)`, swapped under an "
        "`if`) or a method its class rebinds (`self.attn = self._attn_npu`)."
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
            def slice_tensor(data, seq_range, dim):
                return data.narrow(dim, seq_range.start, seq_range.length)


            def slice_batch(batch, seq_range):
                return {k: slice_tensor(v, seq_range) for k, v in batch.items()}
            """,
            title="a required argument left out",
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
    )
    node_types = (ast.Call,)
    requires = ("(",)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Call)
        if not node.keywords and len(node.args) < 1:
            return
        found = callee(self.ctx, node)
        if found is None:
            return
        sig = found.sig
        bad = [kw for kw in node.keywords if kw.arg is not None and not sig.accepts_keyword(kw.arg)]
        limit = sig.max_positional()
        starred = any(isinstance(a, ast.Starred) for a in node.args)
        too_many = limit is not None and not starred and len(node.args) > limit
        missing: list[str] = []
        if not (bad or too_many or starred or any(kw.arg is None for kw in node.keywords)):
            missing = sig.missing(len(node.args), {kw.arg for kw in node.keywords if kw.arg})
        if not (bad or too_many or missing) or not confirmed(self.ctx, node, found):
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
            names = ", ".join(f"`{p}`" for p in missing)
            self.report(
                node,
                f"{what} ({found.where}) requires {names}, which this call does not pass: it raises TypeError",
            )
