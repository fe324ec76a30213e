"""NPU459 forwarded-arguments-swapped."""

from __future__ import annotations

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni import losspath


class ForwardedArgumentsSwapped(Rule):
    code = "NPU459"
    name = "forwarded-arguments-swapped"
    summary = (
        "A function hands two of its own parameters on positionally to a function whose signature names them "
        "in the other order."
    )
    why = (
        "Loss and routing wrappers forward their parameters to the kernel they dispatch to: "
        "`fixed_cross_entropy(source, target, num_items_in_batch, ignore_index)`, "
        "`load_balancing_loss(gate_logits, num_experts, top_k, attention_mask)`. Two integers passed in the "
        "wrong order raise nothing: the loss is divided by -100 and the token count becomes the ignore index, "
        "or the one-hot encoding runs over `top_k` classes. When the wrapper's arguments carry the callee's own "
        "parameter names and two of them sit in each other's positions, the call is reported. The callee is "
        "read from the module (a def, an alias of one) or from the `veomni` / `transformers` module it is "
        "imported from; nothing is imported or run."
    )
    bad = (
        Example(
            """
            def fixed_cross_entropy(source, target, num_items_in_batch=None, ignore_index=-100):
                ...


            def eager_cross_entropy(logits, labels, num_items_in_batch=None, ignore_index=-100):
                return fixed_cross_entropy(logits, labels, ignore_index, num_items_in_batch)
            """,
            path="veomni/ops/kernels/cross_entropy/eager.py",
            title="the token count and the ignore index swapped",
        ),
    )
    good = (
        Example(
            """
            def fixed_cross_entropy(source, target, num_items_in_batch=None, ignore_index=-100):
                ...


            def eager_cross_entropy(logits, labels, num_items_in_batch=None, ignore_index=-100):
                return fixed_cross_entropy(logits, labels, num_items_in_batch, ignore_index)
            """,
            path="veomni/ops/kernels/cross_entropy/eager.py",
        ),
    )
    fix_safety = "No fix: pass the arguments by keyword."
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def finish(self) -> None:
        for call, callee, arg, param in losspath.swapped_arguments(self.ctx.tree, self.ctx.source.path):
            self.report(
                call,
                f"`{arg}` is passed where `{callee}` takes `{param}` (and `{param}` where it takes `{arg}`): the "
                "two values land in each other's parameters; pass them by keyword",
            )
