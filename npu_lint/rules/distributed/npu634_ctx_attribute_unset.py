"""NPU634 ctx-attribute-unset."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.ctxattrs import unset_ctx_reads


class CtxAttributeUnset(Rule):
    code = "NPU634"
    name = "ctx-attribute-unset"
    summary = (
        "The `backward` of a `torch.autograd.Function` reads `ctx.<name>` that no method of the class sets "
        "(its forward lost the `ctx.<name> = ...` line, or sets it under another name)."
    )
    why = (
        "VeOmni's sequence-parallel and MoE communication is written as autograd Functions whose forward "
        "stores what the backward needs on `ctx` (the process group, the scatter and gather dims, the "
        "unpadded length, the split sizes). A forward that no longer sets one of them still runs, and so does "
        "every forward-only test; the first backward pass raises `AttributeError`, on NPU often in a "
        "sequence-parallel configuration GPU CI did not train. The class is the reference: an attribute "
        "is set when any of its methods assigns it; a class that hands `ctx` to a helper (which may set "
        "anything), aliases it or reaches its `__dict__`, or that has a base besides `Function` (a mixin's "
        "forward may set it), is not judged; a `classmethod` forward's ctx is its second parameter."
    )
    bad = (
        Example(
            """
            import torch


            class UlyssesGather(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x, group, dim):
                    ctx.group = group
                    return all_gather(x, group, dim)

                @staticmethod
                def backward(ctx, grad):
                    return slice_rank(grad, ctx.group, ctx.dim), None, None
            """,
            path="veomni/distributed/sequence_parallel/toy_gather.py",
        ),
    )
    good = (
        Example(
            """
            import torch


            class UlyssesGather(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x, group, dim):
                    ctx.group = group
                    ctx.dim = dim
                    ctx.save_for_backward(x)
                    return all_gather(x, group, dim)

                @staticmethod
                def backward(ctx, grad):
                    (x,) = ctx.saved_tensors
                    return slice_rank(grad, ctx.group, ctx.dim), None, None
            """,
            path="veomni/distributed/sequence_parallel/toy_gather.py",
        ),
    )
    fix_safety = "No fix: set the attribute in the forward (or read the one it sets)."
    node_types = (ast.ClassDef,)
    requires = ("backward",)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.ClassDef)
        for read in unset_ctx_reads(node):
            self.report(
                read,
                f"`{node.name}.backward` reads `ctx.{read.attr}`, which no method of `{node.name}` sets: the "
                "first backward pass raises AttributeError",
            )
