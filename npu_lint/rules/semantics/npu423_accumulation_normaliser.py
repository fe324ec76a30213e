"""NPU423 accumulation-normaliser."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

from npu_lint.core.astutil import nodes_of
from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (memoised per file)
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.semantics._shared import functions_of
from npu_lint.veomni import losspath
from npu_lint.veomni.patchgen import load_file
from npu_lint.veomni.upstream import last_name

# the per-micro-batch sample count (what a micro-batch holds, not how many of them a step accumulates)
_BATCH_SIZES = ("micro_batch_size", "per_device_train_batch_size", "train_micro_batch_size_per_gpu")
# where a VeOmni tree's data loaders fill the last step of an epoch with marked filler micro-batches
_LOADER_MODULES = (
    "veomni/data/dynamic_batching.py",
    "veomni/data/data_loader.py",
    "veomni/data/dataloader.py",
)


@functools.lru_cache(maxsize=16)
def _filler_key_at(path: str, mtime: float, size: int) -> str | None:
    """The key a loader sets to True on the filler micro-batches it appends (`batch["padding_flag"] = True`)."""
    parsed = load_file(path)  # the run's one tree of the file (shared with the file pass)
    tree = parsed.tree if parsed is not None else None
    if tree is None:
        return None
    for node in nodes_of(tree, ast.Assign):
        if not (isinstance(node.value, ast.Constant) and node.value.value is True and len(node.targets) == 1):
            continue
        target = node.targets[0]
        if (
            isinstance(target, ast.Subscript)
            and isinstance(target.slice, ast.Constant)
            and isinstance(target.slice.value, str)
            and "pad" in target.slice.value.lower()
        ):
            return target.slice.value
    return None


def tree_filler_key(root: str | None) -> tuple[str, str] | None:
    """The tree's filler-micro-batch marker and the loader module that sets it (None: the tree has none)."""
    if root is None:
        return None
    for rel in _LOADER_MODULES:
        path = Path(root, rel)
        if path.is_file():
            stat = path.stat()
            key = _filler_key_at(str(path), stat.st_mtime, stat.st_size)
            if key is not None:
                return key, rel
    return None


def _label_count(node: ast.AST) -> bool:
    """`batch["labels"] != IGNORE_INDEX` (or `.ne(...)`): a count of one micro-batch's loss tokens."""
    for n in _walk(node):
        operand = None
        if isinstance(n, ast.Compare) and any(isinstance(op, ast.NotEq) for op in n.ops):
            operand = n.left
        elif isinstance(n, ast.Call) and last_name(n.func) == "ne" and isinstance(n.func, ast.Attribute):
            operand = n.func.value
        if (
            isinstance(operand, ast.Subscript)
            and isinstance(operand.slice, ast.Constant)
            and isinstance(operand.slice.value, str)
            and "label" in operand.slice.value
        ):
            return True
    return False


def _loss_values(comp: ast.AST) -> set[str]:
    """Names a comprehension binds from a loss container (`for k, v in loss_dict.items()`)."""
    out: set[str] = set()
    for gen in getattr(comp, "generators", []):
        if "loss" in ast.unparse(gen.iter).lower():
            out.update(n.id for n in _walk(gen.target) if isinstance(n, ast.Name))
    return out


class AccumulationNormaliser(Rule):
    code = "NPU423"
    name = "accumulation-normaliser"
    summary = "A step's loss is normalised by something else than what the step accumulates: a micro-batch's loss divided by the micro-batch size, or the step's token count counting the loader's filler micro-batches."
    why = (
        "Gradient accumulation sums the gradients of a step's micro-batches, so each micro-batch's mean loss is "
        "divided by the number of micro-batches (or weighted by its share of the step's loss tokens). Dividing by "
        "the micro-batch size instead (a per-micro-batch sample count, often forced to 1) leaves the losses "
        "summed: gradients and the logged loss grow with the number of micro-batches, and the effective learning "
        "rate with the accumulation steps. Likewise the step's token count is the denominator of every "
        "micro-batch's weight: when the tree's loader fills the last step of an epoch with marked copies of a "
        "micro-batch (VeOmni's dynamic batching sets `padding_flag`), a count that includes them is too large and "
        "the real micro-batches of that step are down-weighted. Checked in trainers, loss utilities and any "
        "function that divides a loss (or each value of a loss dict) by a micro-batch size, or accumulates the "
        "label tokens of batch dicts (`batch['labels'] != IGNORE_INDEX`) without skipping the tree's marker."
        " A step's job-wide count (`global_*_token_len`, `global_num_tokens`) assigned the rank's own value of the same quantity with no call that could reduce it across ranks is reported too: each rank then normalises by its own count while the gradients are averaged."
    )
    bad = (
        Example(
            """
            def scale_for_accumulation(self, losses):
                return {name: value / self.args.train.micro_batch_size for name, value in losses.items()}
            """,
            path="veomni/trainer/diffusion_trainer.py",
            title="each loss of a dict divided by the micro-batch size",
        ),
        Example(
            """
            def backward_micro(model, micro, cfg):
                step_loss = model(**micro).loss / cfg.per_device_train_batch_size
                step_loss.backward()
                return step_loss.detach()
            """,
            path="veomni/trainer/accumulate.py",
            title="a mean loss divided by the per-device batch size",
        ),
    )
    good = (
        Example(
            """
            def scale_for_accumulation(self, losses):
                return {name: value / self.num_micro_batches for name, value in losses.items()}


            def backward_micro(model, micro, cfg, n_micro):
                step_loss = model(**micro).loss / n_micro
                step_loss.backward()
                samples = cfg.micro_batch_size * n_micro
                return step_loss.detach(), samples
            """,
            path="veomni/trainer/accumulate.py",
        ),
    )
    fix_safety = "No fix: which count normalises the step is the trainer's."

    requires = (("micro_batch_size", "batch_size", "label", "global_"),)
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:  # trainers, loss utilities, model code: anything but tests
        return not ctx.source.kind.test

    def finish(self) -> None:
        text = self.ctx.source.text
        if "global_" in text:
            self._unreduced_globals()
        if any(size in text for size in _BATCH_SIZES) and "loss" in text:
            self._batch_size_divisors()
        if "label" in text and "+=" in text and ("!=" in text or ".ne(" in text):
            self._filler_batches()

    def _unreduced_globals(self) -> None:
        """A step's global count (`global_*_token_len`, the all-rank loss tokens) assigned the rank's own."""
        for func in functions_of(self.ctx.tree, self.ctx.source.text, "global_"):
            for node, name, local in losspath.unreduced_globals(func):
                self.report(
                    node,
                    f"`{name}` is meant for the whole job but takes this rank's `{local}` as it is (no reduction "
                    "across ranks): each rank normalises its loss by its own count while the gradients are "
                    "averaged over ranks, so ranks with fewer tokens weigh more; reduce it (an all-reduce sum) "
                    "first",
                )

    def _batch_size_divisors(self) -> None:
        seen: set[int] = set()
        for func in functions_of(self.ctx.tree, self.ctx.source.text, *_BATCH_SIZES):
            comps = [n for n in _walk(func) if isinstance(n, (ast.DictComp, ast.ListComp, ast.GeneratorExp))]
            bound: dict[int, set[str]] = {}
            for comp in comps:
                names = _loss_values(comp)
                if names:
                    for n in _walk(comp):
                        bound[id(n)] = names
            for node in _walk(func):
                if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)) or id(node) in seen:
                    continue
                size = last_name(node.right) if isinstance(node.right, (ast.Name, ast.Attribute)) else None
                if size not in _BATCH_SIZES:
                    continue
                left = {n.id for n in _walk(node.left) if isinstance(n, ast.Name)}
                text = ast.unparse(node.left).lower()
                if not ("loss" in text or left & bound.get(id(node), set())):
                    continue
                seen.add(id(node))
                self.report(
                    node,
                    f"`{ast.unparse(node.left)}` is divided by `{ast.unparse(node.right)}`, the number of samples "
                    "in one micro-batch: gradient accumulation sums the micro-batches' losses, so a mean loss must "
                    "be divided by the number of micro-batches the step accumulates; as written the gradients grow "
                    "with the accumulation steps",
                )

    def _filler_batches(self) -> None:
        counts: list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, ast.AugAssign]] = []
        for func in functions_of(self.ctx.tree, self.ctx.source.text, "+="):
            for node in _walk(func):
                if (
                    isinstance(node, ast.AugAssign)
                    and isinstance(node.op, ast.Add)
                    and _label_count(node.value)
                ):
                    counts.append((func, node))
                    break
        if not counts:
            return
        found = tree_filler_key(self.ctx.project.root if self.ctx.project else None)
        if found is None:
            return
        key, where = found
        seen: set[int] = set()
        for func, node in counts:
            if id(node) in seen:
                continue
            seen.add(id(node))
            if any(isinstance(n, ast.Constant) and n.value == key for n in _walk(func)):
                continue
            self.report(
                node,
                f"`{func.name}` adds up the label tokens of every micro-batch, but the tree's loader "
                f"(`{where}`) appends filler micro-batches marked `{key}` to complete the last step: counting them "
                "inflates the step's token count, so that step's real micro-batches are down-weighted; skip the "
                f"batches whose `{key}` is set",
            )
