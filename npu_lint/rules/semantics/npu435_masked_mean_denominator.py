"""NPU435 masked-mean-denominator."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import nodes_of
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni import losspath

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_MASK_WORDS = ("mask", "valid", "keep")
_CASTS = frozenset(
    {"float", "bool", "to", "unsqueeze", "type_as", "half", "bfloat16", "int", "long", "detach"}
)
_SIZES = frozenset({"numel", "size", "nelement"})


def _strip(node: ast.AST) -> ast.AST:
    """`mask.float().unsqueeze(-1)` -> `mask`."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _CASTS:
        node = node.func.value
    return node


def _summed(node: ast.AST) -> ast.AST | None:
    """The operand of `E.sum(...)` / `torch.sum(E, ...)` (also under a mean over the dimensions the sum left,
    `E.reshape(b, c, -1).sum(-1).mean(-1)`, and with E's reshapes peeled), else None."""
    red = losspath.reduction_of(node)
    if red is not None and red[0] == "mean":  # a mean over the channels of a sum over the positions
        inner = losspath.reduction_of(red[1])
        red = inner if inner is not None and inner[0] == "sum" else None
    if red is None or red[0] != "sum":
        return None
    return losspath.strip_shape_ops(red[1])


def _full_size(node: ast.AST) -> str | None:
    """How ``node`` counts every position: `x.numel()`, `len(x)`, `x.shape[0]`, `x.size(-1)`."""
    for n in ast.walk(node):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _SIZES:
            return ast.unparse(n)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "len":
            return ast.unparse(n)
        if isinstance(n, ast.Attribute) and n.attr == "shape":
            return ast.unparse(n)
    return None


def _counted_names(node: ast.AST) -> set[str]:
    """Names ``node`` reads for their values, not only for their size (`mask.numel()` counts every position)."""
    sized: set[int] = set()
    for n in ast.walk(node):
        inner = None
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _SIZES:
            inner = n.func.value
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "len" and n.args:
            inner = n.args[0]
        elif isinstance(n, ast.Attribute) and n.attr == "shape":
            inner = n.value
        if inner is not None:
            sized.update(id(x) for x in ast.walk(inner))
    return {x.id for x in ast.walk(node) if isinstance(x, ast.Name) and id(x) not in sized}


class MaskedMeanDenominator(Rule):
    code = "NPU435"
    name = "masked-mean-denominator"
    summary = (
        "A masked average divides the masked sum by the number of all positions (`x.numel()`, `len(x)`, a "
        "shape, a product of the tensor's dimensions) instead of by the mask's count."
    )
    why = (
        "An average over the tokens that count (the response tokens of a DPO/PPO sequence, the labelled "
        "positions of a loss) is `(x * mask).sum() / mask.sum()`. Divided by every position instead -- "
        "`.numel()`, `len(...)`, a shape -- the prompt and padding positions "
        "count in the denominator: the average shrinks with the prompt length, and two sequences of one batch "
        "(the chosen and rejected answers) are scaled differently, which biases the preference margin. Nothing "
        "fails. The check takes a mask to be a local built by a comparison (`labels != ignore_index`) or named "
        "for one (`mask`, `valid`, `keep`), and looks at the divisions of a sum of a product with it (`.mean()` of a masked product is left alone: "
        "per-pixel and per-token losses use it on purpose)."
    )
    bad = (
        Example(
            """
            def sequence_logp(token_logps, labels, ignore_index, average):
                keep = labels != ignore_index
                if average:
                    return (token_logps * keep).sum(-1) / labels.size(-1)
                return (token_logps * keep).sum(-1)
            """,
            path="veomni/trainer/toy_preference_trainer.py",
            title="averaged over every position, prompt and padding included",
        ),
    )
    good = (
        Example(
            """
            def sequence_logp(token_logps, labels, ignore_index, average):
                keep = labels != ignore_index
                count = keep.sum(-1).clamp(min=1)
                if average:
                    return (token_logps * keep).sum(-1) / count
                return (token_logps * keep).sum(-1)
            """,
            path="veomni/trainer/toy_preference_trainer.py",
            title="divided by the mask's count",
        ),
    )
    fix_safety = "No fix: the count to divide by is the author's call."
    requires = ((".sum(", "torch.sum("), ("mask", "valid", "keep", "!="))
    node_types = _FUNCS

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, _FUNCS)
        divisions = [
            n
            for n in nodes_of(node, ast.BinOp)
            if isinstance(n.op, ast.Div) and _summed(n.left) is not None  # type: ignore[attr-defined]
        ]
        if not divisions:
            return  # no sum divided here: nothing to read (most functions)
        masks: set[str] = {a.arg for a in node.args.args if any(w in a.arg.lower() for w in _MASK_WORDS)}
        derived: dict[str, set[str]] = {}
        values: dict[str, ast.AST] = {}
        for n in ast.walk(node):
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
                name, value = n.targets[0].id, _strip(n.value)
                if isinstance(value, ast.Compare) or any(w in name.lower() for w in _MASK_WORDS):
                    masks.add(name)
                derived[name] = {x.id for x in ast.walk(n.value) if isinstance(x, ast.Name)}
                values[name] = n.value
        if not masks:
            return
        for n in divisions:
            if isinstance(n, ast.BinOp):
                mask = self._masked(_summed(n.left), masks, values)
                if mask is None:
                    continue
                reads = self._closure(_counted_names(n.right), derived)
                size = _full_size(n.right)
                if size is None:  # `n = len(values)` ... `/ n`; `count = float(F * H * W)` ... `/ count`
                    sizes = losspath.shape_names(node)
                    names = [x.id for x in ast.walk(n.right) if isinstance(x, ast.Name) and x.id in values]
                    size = next(
                        (
                            s
                            for s in (losspath.every_position(values[x], sizes) for x in names)
                            if s is not None
                        ),
                        None,
                    )
                if mask not in reads and size is not None:
                    self.report(
                        n.right,
                        f"the sum masked by `{mask}` is divided by `{size}`, which counts every position (the "
                        f"masked-out ones included), not by `{mask}`'s count: divide by `{mask}.sum()` "
                        "(clamped to at least 1)",
                    )

    @staticmethod
    def _masked(
        product: ast.AST | None, masks: set[str], values: dict[str, ast.AST] | None = None
    ) -> str | None:
        """The mask `product` multiplies by (`x * mask`, `torch.mul(x, mask.float())`, a local holding one:
        `masked_loss = per_element_loss * loss_mask`), else None."""
        if product is None:
            return None
        if isinstance(product, ast.Name) and values and product.id in values:
            held = _strip(values[product.id])
            if isinstance(held, ast.BinOp) and isinstance(held.op, ast.Mult):
                product = held
        operands: list[ast.AST] = []
        if isinstance(product, ast.BinOp) and isinstance(product.op, ast.Mult):
            operands = [product.left, product.right]
        elif (
            isinstance(product, ast.Call)
            and isinstance(product.func, ast.Attribute)
            and product.func.attr == "mul"
        ):
            operands = list(product.args) + (
                []
                if isinstance(product.func.value, ast.Name) and product.func.value.id == "torch"
                else [product.func.value]
            )
        for op in operands:
            op = _strip(op)
            if isinstance(op, ast.Name) and op.id in masks:
                return op.id
        return None

    @staticmethod
    def _closure(names: set[str], derived: dict[str, set[str]]) -> set[str]:
        out, todo = set(names), list(names)
        while todo:
            for dep in derived.get(todo.pop(), ()):  # `count = keep.sum()` reads keep
                if dep not in out:
                    out.add(dep)
                    todo.append(dep)
        return out
