"""NPU426 micro-batch-weight-from-step."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import last_name, nodes_of
from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (memoised per file)
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.semantics._shared import functions_of


def _loop_names(loop: ast.For) -> tuple[str, ast.expr] | None:
    """`for item in items` / `for i, item in enumerate(items)`: (item, items)."""
    target, source = loop.target, loop.iter
    if (
        isinstance(source, ast.Call)
        and isinstance(source.func, ast.Name)
        and source.func.id == "enumerate"
        and source.args
        and isinstance(target, ast.Tuple)
        and len(target.elts) == 2
    ):
        target, source = target.elts[1], source.args[0]
    if isinstance(target, ast.Name) and isinstance(source, (ast.Name, ast.Attribute)):
        return target.id, source
    return None


def _body_nodes(loop: ast.For) -> list[ast.AST]:
    out: list[ast.AST] = []
    stack: list[ast.AST] = list(loop.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        out.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return out


class MicroBatchWeightFromStep(Rule):
    code = "NPU426"
    name = "micro-batch-weight-from-step"
    summary = (
        "Inside a loop over a step's micro-batches, a per-micro-batch value (named for the loop's item: "
        "`micro_batch_token_len`) is computed from the whole collection (`count_loss_token(micro_batches)`) "
        "instead of the item."
    )
    why = (
        "Gradient accumulation weights each micro-batch's mean loss by its own share of the step's tokens "
        "(VeOmni's `mean_global_loss`: the micro-batch's token count over the step's global count). The trainer "
        "loop sets that per-micro-batch count before each forward; computed from the whole list of micro-batches "
        "it is the same step-wide count on every iteration, so every micro-batch gets the same weight: the "
        "gradients become a sum of per-micro-batch means scaled by the number of micro-steps instead of the "
        "token-weighted mean, on every device and without an error. Checked in every loop of a file that "
        "handles a loss (trainers, loss helpers, model code): `for item in items` (or `enumerate(items)`), an "
        "assignment whose name starts with the item's name and whose call is handed the whole `items` but "
        "never the item."
    )
    bad = (
        Example(
            """
            from veomni.utils.loss_utils import count_loss_token


            class ToyTrainer:
                def train_step(self, batches):
                    self.batches_tokens = count_loss_token(batches)
                    for step, batch in enumerate(batches):
                        self.batch_tokens = count_loss_token(batches)
                        loss = self.forward_backward(batch)
                    return loss
            """,
            path="veomni/trainer/toy_trainer.py",
            title="the per-micro-batch token count taken from the whole step",
        ),
        Example(
            """
            def accumulate(model, micro_batches, count_valid):
                total = 0.0
                for mb in micro_batches:
                    mb_weight = count_valid(micro_batches) / len(micro_batches)
                    loss = model(**mb).loss * mb_weight
                    loss.backward()
                    total += loss.item()
                return total
            """,
            path="veomni/trainer/toy_accumulate.py",
            title="a helper's weight from the whole list",
        ),
    )
    good = (
        Example(
            """
            from veomni.utils.loss_utils import count_loss_token


            class ToyTrainer:
                def train_step(self, batches):
                    self.batches_tokens = count_loss_token(batches)
                    for step, batch in enumerate(batches):
                        self.batch_tokens = count_loss_token(batch)
                        self.batch_share = self.batch_tokens["foundation_tokens"] / len(batches)
                        loss = self.forward_backward(batch)
                    return loss
            """,
            path="veomni/trainer/toy_trainer.py",
        ),
    )
    fix_safety = "No fix: the item to count is the author's to name."
    requires = ("loss", "for ")
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def finish(self) -> None:
        seen: set[int] = set()
        for func in functions_of(self.ctx.tree, self.ctx.source.text, "for "):
            for loop in nodes_of(func, ast.For):
                if not isinstance(loop, ast.For) or id(loop) in seen:
                    continue
                seen.add(id(loop))
                names = _loop_names(loop)
                if names is None:
                    continue
                item, items = names
                whole = ast.unparse(items)
                whole_name = last_name(items) or whole
                if len(item) < 2 or item == whole_name:
                    continue
                for node in _body_nodes(loop):
                    if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
                        continue
                    ident = last_name(node.targets[0])
                    if ident is None or not ident.startswith(item + "_") or whole_name in ident:
                        continue
                    used = [n for n in _walk(node.value) if isinstance(n, (ast.Name, ast.Attribute))]
                    if any(isinstance(n, ast.Name) and n.id == item for n in used):
                        continue
                    handed = [
                        a
                        for c in _walk(node.value)
                        if isinstance(c, ast.Call)
                        and last_name(c.func) != "len"  # the step's size is step-wide
                        for a in [*c.args, *(k.value for k in c.keywords)]
                        if ast.unparse(a) == whole
                    ]
                    if not handed:
                        continue
                    self.report(
                        handed[0],
                        f"`{ast.unparse(node.targets[0])}` is the value of the loop's `{item}` but is computed from "
                        f"the whole `{whole}`: every iteration gets the same step-wide value (for a token count that "
                        "weights each micro-batch's loss, every micro-batch then weighs the same and gradient "
                        f"accumulation no longer takes the token-weighted mean); hand it `{item}`",
                    )
