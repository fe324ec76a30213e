"""NPU444 backward-drops-saved-factor."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni import losspath

_LOSS_WORDS = ("loss", "cross_entropy", "logprob", "entropy", "distill")


def _is_function(cls: ast.ClassDef) -> bool:
    return any(
        (isinstance(b, ast.Attribute) and b.attr == "Function")
        or (isinstance(b, ast.Name) and b.id == "Function")
        for b in cls.bases
    )


class BackwardDropsSavedFactor(Rule):
    code = "NPU444"
    name = "backward-drops-saved-factor"
    summary = (
        "A custom autograd Function of a loss path keeps a value for its backward (`ctx.x = ...`, "
        "`save_for_backward`) that the backward never reads."
    )
    why = (
        "A hand-written backward restates the derivative of its forward: everything the forward scales the loss "
        "by (the local token count, the global count, the sequence-parallel world size, a chunk's weight) is kept "
        "on `ctx` for it. A kept value the backward never reads is a factor the gradient lost: the forward's loss "
        "is right, the gradient is off by that factor -- an effective learning rate divided by the SP degree, or "
        "every rank weighted alike -- and no loss curve shows it. The check runs on `torch.autograd.Function` "
        "classes of a loss path (the file or class names a loss, cross-entropy or log-probs), and compares what `forward` stores on its "
        "context with what `backward` reads."
        " A backward that multiplies one precomputed gradient by the incoming gradient and returns another one as the forward computed it is reported too: a loss scaled after the kernel reaches one input only."
    )
    bad = (
        Example(
            """
            import torch
            import torch.distributed as dist


            class ReduceTokenLoss(torch.autograd.Function):
                @staticmethod
                def forward(ctx, loss, num_tokens, group):
                    local = num_tokens.detach().clone()
                    loss = loss * num_tokens
                    dist.all_reduce(loss, group=group)
                    dist.all_reduce(num_tokens, group=group)
                    ctx.save_for_backward(local, num_tokens)
                    ctx.world = dist.get_world_size(group)
                    return loss / num_tokens.clamp_min(1)

                @staticmethod
                def backward(ctx, grad_output):
                    local, total = ctx.saved_tensors
                    return local * grad_output / total.clamp(min=1), None, None
            """,
            path="veomni/distributed/toy_loss.py",
            title="the world-size factor kept and never used",
        ),
    )
    good = (
        Example(
            """
            import torch
            import torch.distributed as dist


            class ReduceTokenLoss(torch.autograd.Function):
                @staticmethod
                def forward(ctx, loss, num_tokens, group):
                    local = num_tokens.detach().clone()
                    loss = loss * num_tokens
                    dist.all_reduce(loss, group=group)
                    dist.all_reduce(num_tokens, group=group)
                    ctx.save_for_backward(local, num_tokens)
                    ctx.world = dist.get_world_size(group)
                    return loss / num_tokens.clamp_min(1)

                @staticmethod
                def backward(ctx, grad_output):
                    local, total = ctx.saved_tensors
                    return ctx.world * local * grad_output / total.clamp(min=1), None, None
            """,
            path="veomni/distributed/toy_loss.py",
            title="every kept factor in the gradient",
        ),
    )
    fix_safety = "No fix."
    requires = ("Function", "backward", "loss")
    node_types = (ast.ClassDef,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.ClassDef)
        if not _is_function(node):
            return
        path = self.ctx.source.path.lower()
        if not any(w in path or w in node.name.lower() for w in _LOSS_WORDS):
            return  # a kernel's own autograd (attention, convolution): not a loss path
        for method in node.body:
            if isinstance(method, ast.FunctionDef) and method.name == "backward":
                for where, name, other in losspath.unscaled_gradients(method):
                    self.report(
                        where,
                        f"`{node.name}.backward` returns `{name}` as the forward computed it, while `{other}` is "
                        "multiplied by the incoming gradient: a loss scaled after this kernel (a coefficient, the "
                        "micro-batch weight, a loss scale) reaches one input's gradient and not this one",
                    )
        for where, name in losspath.saved_but_unused(node):
            self.report(
                where,
                f"`{name}` is kept for `{node.name}.backward`, which never reads it: the gradient lost a factor "
                "the forward applies to the loss (the forward and backward no longer agree)",
            )
