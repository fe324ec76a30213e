"""NPU425 loss-sum-discarded."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import nodes_of
from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (memoised per file)
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.semantics._shared import functions_of
from npu_lint.veomni import losspath
from npu_lint.veomni.upstream import last_name


def _loss_terms(value: ast.AST) -> list[str]:
    """The loss terms a value combines: `loss + coef * aux_loss` -> [`loss`, `aux_loss`]; a value that adds
    (or subtracts) a loss to something else, directly or through `torch.add(a, b)` / `a.add(b)`."""
    adds = [
        n
        for n in _walk(value)
        if (isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Add, ast.Sub)))
        or (isinstance(n, ast.Call) and last_name(n.func) == "add")
    ]
    if not adds:
        return []
    names = []
    for n in _walk(value):
        if isinstance(n, (ast.Name, ast.Attribute)):
            name = last_name(n) or ""
            if (
                "loss" in name.lower()
                and name not in names
                and not name.lower().endswith(("_fn", "_func", "_fct"))
            ):
                names.append(name)
    return names


def _loads(func: ast.AST) -> set[str]:
    return {n.id for n in _walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _escapes(func: ast.AST) -> bool:
    """Locals that may be read without a name: `locals()`, `vars()`, `global` / `nonlocal` declarations."""
    for n in _walk(func):
        if isinstance(n, (ast.Global, ast.Nonlocal)):
            return True
        if (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name)
            and n.func.id in ("locals", "vars", "exec", "eval")
        ):
            return True
    return False


class LossSumDiscarded(Rule):
    code = "NPU425"
    name = "loss-sum-discarded"
    summary = (
        "A loss combined with another term (`total = loss + coef * aux_loss`) is stored in a local that is never "
        "read or returned: the combined loss is dropped and the function goes on with the part."
    )
    why = (
        "A forward (or a trainer step, a loss helper) that adds the auxiliary terms of a loss (the MoE "
        "load-balancing loss, a z-loss, a KL term, a second head's loss) must hand the sum on: return it, put it in "
        "the output, back-propagate it. When the sum goes into a new local that nothing reads, the code still "
        "looks complete (the auxiliary loss is computed, logged and returned as its own field) but the returned "
        "loss is the bare main term: the routers get no balancing gradient on either device and experts collapse, "
        "with no error. Checked in every function of model code, specs, generated copies, kernels, trainers and "
        "loss helpers: a local assigned (or augmented with) a sum or difference that involves a loss, never read "
        "anywhere in the function (nested functions included). A name starting with `_` is an intentional discard; "
        "`+=` on a name bound to another tensor adds in place and is not a discard."
        " In a chunked or per-layer loop, a loss or gradient accumulator started at zero (`torch.zeros_like(w)`, `torch.tensor(0.0)`) and overwritten in the loop (`acc.copy_(x)`, `acc = x`, on any path) keeps only the last chunk's value."
    )
    bad = (
        Example(
            """
            import torch


            def moe_lm_forward(self, input_ids=None, labels=None, **kwargs):
                outputs = self.model(input_ids, **kwargs)
                logits = self.lm_head(outputs.last_hidden_state)
                loss = self.loss_function(logits, labels, self.vocab_size)
                balance = self.balance_loss(outputs.router_logits)
                if labels is not None:
                    loss_with_balance = loss + self.config.router_aux_loss_coef * balance
                return {"loss": loss, "logits": logits, "aux_loss": balance}
            """,
            path="veomni/models/transformers/toy_moe/toy_moe_gpu_patch_gen_config.py",
            title="the aux sum stored under a new name, the bare loss returned",
        ),
        Example(
            """
            def step_loss(model, batch, z_coef):
                out = model(**batch)
                objective = out.loss.float()
                objective += z_coef * out.router_z_loss.float()
                out.loss.backward()
                return out.loss.detach()
            """,
            path="veomni/trainer/toy_trainer.py",
            title="an augmented total never back-propagated",
        ),
    )
    good = (
        Example(
            """
            def moe_lm_forward(self, input_ids=None, labels=None, **kwargs):
                outputs = self.model(input_ids, **kwargs)
                logits = self.lm_head(outputs.last_hidden_state)
                loss = self.loss_function(logits, labels, self.vocab_size)
                balance = self.balance_loss(outputs.router_logits)
                if labels is not None:
                    total = loss + self.config.router_aux_loss_coef * balance
                    loss = total
                _unused_loss = loss + 0
                return {"loss": loss, "logits": logits, "aux_loss": balance}
            """,
            path="veomni/models/transformers/toy_moe/toy_moe_gpu_patch_gen_config.py",
        ),
        Example(
            """
            def two_head_forward(self, text_out, depth_out):
                final_loss = text_out.loss
                final_loss += depth_out.loss
                return {"loss": text_out.loss, "depth_loss": depth_out.loss}
            """,
            path="veomni/models/transformers/toy_moe/toy_moe_gpu_patch_gen_config.py",
            title="`+=` on a name bound to another tensor adds in place: the returned loss carries the sum",
        ),
    )
    fix_safety = "No fix: whether the sum should replace the loss or be dropped is the author's decision."
    requires = ("loss", ("+", "add", "-"))
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def finish(self) -> None:
        text = self.ctx.source.text
        if "for " in text or "while " in text:
            for func in functions_of(self.ctx.tree, text, "loss", "grad"):
                for site, name in losspath.overwritten_accumulators(func):
                    self.report(
                        site,
                        f"`{name}` starts at zero before the loop and is overwritten in it (not added to): after "
                        "the loop it holds the last chunk's value, not the sum over the chunks (use `add_` / `+=`)",
                    )
        seen: set[int] = set()
        for func in functions_of(self.ctx.tree, text, "loss"):
            stores: list[tuple[ast.AST, str, ast.AST]] = []
            # names bound to an existing object (`total = out.loss`): a tensor's `+=` adds in place, so the object
            # they alias carries the sum (transformers' moshi) and the name need not be read again
            aliases = {
                t.id
                for n in nodes_of(func, ast.Assign)
                if isinstance(n, ast.Assign) and isinstance(n.value, (ast.Name, ast.Attribute, ast.Subscript))
                for t in n.targets
                if isinstance(t, ast.Name)
            }
            for node in _walk(func):
                if (
                    isinstance(node, ast.Assign)
                    and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)
                ):
                    target, value = node.targets[0], node.value
                elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                    target, value = node.target, node.value
                elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
                    target, value = node.target, node.value
                else:
                    continue
                if target.id.startswith("_") or id(node) in seen:
                    continue
                if isinstance(node, ast.AugAssign):
                    if not isinstance(node.op, (ast.Add, ast.Sub)) or target.id in aliases:
                        continue
                    terms = _loss_terms(ast.BinOp(ast.Name(target.id, ast.Load()), node.op, node.value))
                else:
                    terms = _loss_terms(value)
                if not any(t != target.id for t in terms):
                    continue
                stores.append((node, target.id, value))
            if not stores:
                continue
            loads = _loads(func)
            if _escapes(func):
                continue
            for node, name, value in stores:
                if name in loads:
                    continue
                seen.add(id(node))
                shown = ast.unparse(value)
                shown = shown if len(shown) <= 60 else shown[:57] + "..."
                how = "adds" if isinstance(node, ast.AugAssign) else "takes"
                self.report(
                    node,
                    f"`{name}` {how} `{shown}`, a loss combined with another term, but `{func.name}` never reads or "
                    "returns it: the combined loss is dropped and only its parts go on (an auxiliary term added "
                    "here never reaches a gradient through it); assign the sum to the loss the function hands on",
                )
