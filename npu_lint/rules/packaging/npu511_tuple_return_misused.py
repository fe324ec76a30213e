"""NPU511 tuple-return-misused."""

from __future__ import annotations

import ast

from npu_lint.rules._calls import Callee, callee, confirmed, own_returns
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.signatures import Signature

# what a tuple answers to: anything else read off it is a tensor/object use
_TUPLE_ATTRS = frozenset({"count", "index", "__len__", "__iter__", "__getitem__"})
# arithmetic a tuple does not support (``+`` concatenates and ``*`` repeats, so they are left alone)
_NON_TUPLE_OPS = (
    ast.Sub,
    ast.Div,
    ast.FloorDiv,
    ast.Mod,
    ast.Pow,
    ast.MatMult,
    ast.BitAnd,
    ast.BitOr,
    ast.LShift,
)


class TupleReturnMisused(Rule):
    code = "NPU511"
    name = "tuple-return-misused"
    summary = (
        "The result of one of the tree's own functions, which always returns a fixed-length tuple, is unpacked "
        "into another number of names or used as a single tensor."
    )
    why = (
        "Collective and loss helpers return pairs and triples (`(tensors, sizes)`, `(loss, logits, aux)`); a "
        "caller written for the single-tensor sibling, or for an older arity, fails with `ValueError` on "
        "unpacking, `AttributeError` on `.split()`/`.view()`, or `TypeError` on arithmetic, usually only on "
        "the path that uses it (a backward pass, a sequence-parallel branch, an NPU fallback). The arity is "
        "read from the callee's own `return` statements in the tree being linted (a helper imported from "
        "another module of the tree, a method of the same class, or, for unpacking, a function of the same "
        "file; a top-level helper of the same file used as a tensor is NPU613's): only functions whose every "
        "return is a tuple literal of one length are judged."
    )
    bad = (
        Example(
            """
            import torch


            class SeqGather:
                def gather_parts(self, x, world):
                    parts = [torch.empty_like(x) for _ in range(world)]
                    return parts, [p.shape for p in parts]

                def backward(self, grad, world):
                    out = self.gather_parts(grad, world)
                    return out.split(grad.shape[0])
            """,
            title="a (parts, shapes) pair used as the gathered tensor (a method; imported helpers alike)",
        ),
        Example(
            """
            def compute_loss(logits, labels):
                loss = (logits - labels).pow(2).mean()
                return loss, logits, None


            def step(logits, labels):
                loss, _, _, _ = compute_loss(logits, labels)
                return loss
            """,
            title="four names for a three-value return",
        ),
        Example(
            """
            class Splitter:
                def split_counts(self, total, world):
                    return total // world, total % world

                def average(self, total, world):
                    share = self.split_counts(total, world)
                    share /= world
                    return share
            """,
            title="arithmetic on the pair",
        ),
    )
    good = (
        Example(
            """
            def gather_parts(x, world):
                return [x] * world, [x.shape] * world


            def backward(grad, world):
                parts, _ = gather_parts(grad, world)
                pair = gather_parts(grad, world)
                return parts, pair[0], len(pair)
            """
        ),
    )
    node_types = (ast.Call,)
    requires = ("return",)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Call)
        ctx = self.ctx
        parent = ctx.parent
        if not isinstance(parent, (ast.Assign, ast.Attribute, ast.BinOp)):
            return
        found = callee(ctx, node)
        if found is None or found.sig.kind != "function":
            return
        arity = own_returns(ctx, found)
        if arity is None:
            return
        found = Callee(
            Signature(**{**found.sig.__dict__, "returns": arity}), found.where, found.label, found.same_file
        )
        unpacking = isinstance(parent, ast.Assign) and isinstance(parent.targets[0], (ast.Tuple, ast.List))
        if found.same_file and not unpacking:
            return  # a top-level helper of the same file used as a tensor: NPU613 reports it
        if isinstance(parent, ast.Attribute):
            if parent.value is node and parent.attr not in _TUPLE_ATTRS:
                self._used(node, found, f"`.{parent.attr}`")
            return
        if isinstance(parent, ast.BinOp):
            if isinstance(parent.op, _NON_TUPLE_OPS):
                self._used(node, found, "arithmetic")
            return
        if len(parent.targets) != 1 or parent.value is not node:
            return
        target = parent.targets[0]
        if isinstance(target, (ast.Tuple, ast.List)):
            if any(isinstance(e, ast.Starred) for e in target.elts) or len(target.elts) == arity:
                return
            if not confirmed(ctx, node, found):
                return
            self.report(
                target,
                f"{found.label} ({found.where}) always returns {arity} values; this unpacks "
                f"{len(target.elts)}: it raises ValueError",
            )
            return
        if isinstance(target, ast.Name):
            use = self._tensor_use(target.id, parent)
            if use is not None:
                self._used(node, found, use[1], use[0], target.id)

    def _tensor_use(self, name: str, assign: ast.Assign) -> tuple[ast.AST, str] | None:
        """The first use of ``name`` after ``assign`` bound it, and before the next statement that binds it
        again has run (its right-hand side included), as something other than a tuple: an attribute a tuple
        lacks, or arithmetic a tuple does not support."""
        func = self.ctx.function
        if func is None:
            return None
        start = (assign.lineno, assign.col_offset)
        rebinds: list[int] = []
        uses: list[tuple[ast.AST, str]] = []
        for sub in ast.walk(func):
            if isinstance(sub, ast.Name) and sub.id == name and not isinstance(sub.ctx, ast.Load):
                if sub.lineno > assign.lineno:
                    rebinds.append(sub.lineno)
            elif isinstance(sub, ast.arg) and sub.arg == name:
                return None
            elif isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == name:
                if sub.attr not in _TUPLE_ATTRS:
                    uses.append((sub, f"`.{sub.attr}`"))
            elif isinstance(sub, ast.BinOp) and isinstance(sub.op, _NON_TUPLE_OPS):
                for side in (sub.left, sub.right):
                    if isinstance(side, ast.Name) and side.id == name:
                        uses.append((sub, "arithmetic"))
            elif isinstance(sub, (ast.Global, ast.Nonlocal)) and name in sub.names:
                return None
            if (
                isinstance(sub, ast.AugAssign)
                and isinstance(sub.op, _NON_TUPLE_OPS)
                and isinstance(sub.target, ast.Name)
                and sub.target.id == name
            ):
                uses.append((sub, "arithmetic"))
        end = min(rebinds) if rebinds else None
        after = [
            u for u in uses if (u[0].lineno, u[0].col_offset) > start and (end is None or u[0].lineno <= end)
        ]
        return min(after, key=lambda u: (u[0].lineno, u[0].col_offset)) if after else None

    def _used(
        self, node: ast.AST, found: Callee, use: str, at: ast.AST | None = None, name: str = ""
    ) -> None:
        arity = found.sig.returns
        bound = f" (bound to `{name}`)" if name else ""
        self.report(
            at or node,
            f"{found.label} ({found.where}) returns a tuple of {arity} values; its result{bound} is used as a "
            f"single tensor ({use}), which a tuple does not support",
        )
