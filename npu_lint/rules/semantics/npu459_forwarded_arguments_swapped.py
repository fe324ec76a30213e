"""NPU459 forwarded-arguments-swapped."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import nodes_of, walk
from npu_lint.rules._calls import callee as resolve_callee
from npu_lint.rules._calls import confirmed, misplaced_arguments
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni import losspath

# a function named for running its callee backwards hands the roles over reversed by design
_REVERSING = frozenset(
    {"reverse", "reversed", "inverse", "inv", "undo", "swap", "swapped", "transpose", "transposed"}
)
_REVERSING_NAMES = frozenset({"reload", "restore", "unpermute", "unshuffle"})


def _reverses(name: str) -> bool:
    words = name.lower().strip("_").split("_")
    return bool(set(words) & _REVERSING) or name.lower().strip("_") in _REVERSING_NAMES


def _reads(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _round_trip(func: ast.AST, call: ast.Call, names: set[str]) -> bool:
    """An earlier call of the same callee in the function passes the same names in order and its result
    reaches this call: this call is the round trip's way back (``q = all_to_all(q, scatter_dim, gather_dim)``,
    ``out = attn(q)``, ``all_to_all(out, gather_dim, scatter_dim)``). A second call on another input with the
    names swapped (``rot(k, sin, cos)`` after ``rot(q, cos, sin)``) is no round trip."""
    target = ast.unparse(call.func)
    order = [a.id for a in call.args if isinstance(a, ast.Name) and a.id in names]
    assigns = sorted(
        (n for n in nodes_of(func, ast.Assign) if n.lineno < call.lineno),  # type: ignore[attr-defined]
        key=lambda n: n.lineno,  # type: ignore[attr-defined]
    )
    own = _reads(call) - names
    for first in assigns:
        calls = [c for c in ast.walk(first.value) if isinstance(c, ast.Call)]  # type: ignore[attr-defined]
        if not any(
            ast.unparse(c.func) == target
            and (seen := [a.id for a in c.args if isinstance(a, ast.Name) and a.id in names]) != order
            and sorted(seen) == sorted(order)
            for c in calls
        ):
            continue
        tainted = {t.id for t in first.targets for t in ast.walk(t) if isinstance(t, ast.Name)}  # type: ignore[attr-defined]
        for later in assigns:
            if later.lineno > first.lineno and _reads(later.value) & tainted:  # type: ignore[attr-defined]
                tainted |= {t.id for t in later.targets for t in ast.walk(t) if isinstance(t, ast.Name)}  # type: ignore[attr-defined]
        if own & tainted:
            return True
    return False


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
        "autograd `backward(ctx, ...)`, whose adjoint hands its forward's roles over reversed: `scatter_dim` for `gather_dim`), nor the way back of "
        "a round trip (an earlier call of the same callee passed the pair in order and its result reaches this "
        "call), nor a call in a function named for reversing (`reverse_kl`, `inverse_*`, `reload`)."
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
        if func is not None and _reverses(func.name):
            return  # ``reverse_kl``, ``inverse_all_to_all``, ``reload``: the roles handed over reversed by design
        found = resolve_callee(self.ctx, node)
        if found is None:
            return
        misplaced = misplaced_arguments(node, found.sig)
        if not misplaced or not confirmed(self.ctx, node, found):
            return
        if func is not None and _round_trip(func, node, {name for _, name, _ in misplaced}):
            return
        self._seen.add(id(node))
        for arg, name, param in misplaced[:1]:
            self.report(
                arg,
                f"`{name}` is passed where {found.label} ({found.where}) takes `{param}`, and `{name}` is "
                "another of its parameters: the value lands in the wrong parameter; pass it by keyword",
            )

    def finish(self) -> None:
        swapped = list(losspath.swapped_arguments(self.ctx.tree, self.ctx.source.path))
        if not swapped:
            return  # most files: no enclosing functions to look up
        owner: dict[int, ast.AST] = {}  # each call's innermost enclosing function
        for f in walk(self.ctx.tree):
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for call in nodes_of(f, ast.Call):
                    owner[id(call)] = f
        for call, callee, arg, param in swapped:
            func = owner.get(id(call))
            if id(call) in self._seen or (
                func is not None and (_reverses(func.name) or _round_trip(func, call, {arg, param}))  # type: ignore[attr-defined]
            ):
                continue
            self.report(
                call,
                f"`{arg}` is passed where `{callee}` takes `{param}` (and `{param}` where it takes `{arg}`): the "
                "two values land in each other's parameters; pass them by keyword",
            )
