"""NPU459 forwarded-arguments-swapped."""

from __future__ import annotations

import ast

from npu_lint.rules._calls import callee as resolve_callee
from npu_lint.rules._calls import confirmed, misplaced_arguments
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni import losspath


class ForwardedArgumentsSwapped(Rule):
    code = "NPU459"
    name = "forwarded-arguments-swapped"
    summary = (
        "A function hands two of its own parameters on positionally to a function whose signature names them "
        "in the other order, or hands the tree's own function two values named for each other's parameters "
        "(`forward(k, q, cos, sin)` to `def forward(q, k, ...)`)."
    )
    why = (
        "Loss and routing wrappers forward their parameters to the kernel they dispatch to: "
        "`fixed_cross_entropy(source, target, num_items_in_batch, ignore_index)`, "
        "`load_balancing_loss(gate_logits, num_experts, top_k, attention_mask)`. Two integers passed in the "
        "wrong order raise nothing: the loss is divided by -100 and the token count becomes the ignore index, "
        "or the one-hot encoding runs over `top_k` classes. When the wrapper's arguments carry the callee's own "
        "parameter names and two of them sit in each other's positions, the call is reported. The callee is "
        "read from the module (a def, an alias of one) or from the `veomni` / `transformers` module it is "
        "imported from; nothing is imported or run. The same holds for any call of the tree's own functions, "
        "classes and `self.` methods (resolved as NPU510 resolves them): a positional argument named exactly "
        "like another parameter of the callee (a local `k`, an attribute `self.backward`) while the parameter "
        "it lands in is another named argument's, so the two sit in each other's places, is reported; a name misplaced "
        "alone or passed twice is not (a second conv takes `(out_channels, out_channels)`), nor a call in an "
        "autograd `backward(ctx, ...)`, whose adjoint hands its forward's roles over reversed: `scatter_dim` for `gather_dim`)."
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
        Example(
            """
            def apply_rotary(q, k, cos, sin, unsqueeze_dim=1):
                ...


            def npu_rotary(q, k, cos, sin):
                q_out, k_out = apply_rotary(k, q, cos, sin)
                return q_out, k_out
            """,
            path="veomni/ops/kernels/rope/full/npu.py",
            title="the query and the key handed to each other's parameters",
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
        Example(
            """
            def apply_rotary(q, k, cos, sin, unsqueeze_dim=1):
                ...


            def npu_rotary(query, key, cos, sin):
                return apply_rotary(query, key, cos, sin)
            """,
            path="veomni/ops/kernels/rope/full/npu.py",
        ),
    )
    fix_safety = "No fix: pass the arguments by keyword."
    node_types = (ast.Call,)
    requires = ("(",)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self._seen: set[int] = set()

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Call)
        if len(node.args) < 2:
            return
        func = self.ctx.function
        if func is not None and func.name == "backward" and func.args.args and func.args.args[0].arg == "ctx":
            return  # an autograd adjoint hands its forward's roles over reversed
        found = resolve_callee(self.ctx, node)
        if found is None:
            return
        misplaced = misplaced_arguments(node, found.sig)
        if not misplaced or not confirmed(self.ctx, node, found):
            return
        self._seen.add(id(node))
        for arg, name, param in misplaced[:1]:
            self.report(
                arg,
                f"`{name}` is passed where {found.label} ({found.where}) takes `{param}`, and `{name}` is "
                "another of its parameters: the value lands in the wrong parameter; pass it by keyword",
            )

    def finish(self) -> None:
        for call, callee, arg, param in losspath.swapped_arguments(self.ctx.tree, self.ctx.source.path):
            if id(call) in self._seen:
                continue
            self.report(
                call,
                f"`{arg}` is passed where `{callee}` takes `{param}` (and `{param}` where it takes `{arg}`): the "
                "two values land in each other's parameters; pass them by keyword",
            )
