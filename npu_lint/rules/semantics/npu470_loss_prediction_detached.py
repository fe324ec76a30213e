"""NPU470 loss-prediction-detached."""

from __future__ import annotations

import ast
import re

from npu_lint.core.astutil import assigned_name, last_name
from npu_lint.core.astutil import walk as _walk
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.semantics._shared import first_report, functions_of

_DETACH = ("detach", "stop_gradient")
# torch losses whose first argument is the model's prediction (the differentiated side)
_TORCH_LOSSES = {
    "cross_entropy",
    "nll_loss",
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "kl_div",
    "ctc_loss",
    "poisson_nll_loss",
    "gaussian_nll_loss",
    "mse_loss",
    "l1_loss",
    "smooth_l1_loss",
    "huber_loss",
}
# the argument (keyword or value) names of a prediction: what a training loss differentiates
_THROUGH = (
    "float",
    "to",
    "view",
    "reshape",
    "contiguous",
    "flatten",
    "bfloat16",
    "half",
    "log_softmax",
    "softmax",
    "squeeze",
    "unsqueeze",
    "transpose",
)
_PREDICTION = re.compile(r"logit|hidden|pred|model_out|student|^input$|^inputs$|^scores?$", re.IGNORECASE)
_NOT_TRAINING = re.compile(r"eval|valid|metric|^log_|_log$|report|record|monitor|^test", re.IGNORECASE)
_NOT_LOSS = re.compile(
    r"^(log|record|report|update|append|gather|all_reduce|reduce|print|track)", re.IGNORECASE
)


def _is_loss_callee(name: str) -> bool:
    low = name.lower()
    if _NOT_LOSS.match(low) or low.endswith(("_metrics", "_meter", "_stats")):
        return False
    return low in _TORCH_LOSSES or "loss" in low


def _detached_root(node: ast.AST) -> ast.AST | None:
    """``x`` of an argument written `x.detach()` (through `.float()` / `.to(...)` / `.view(...)` on either side)."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr in _DETACH:
            return node.func.value
        if node.func.attr in _THROUGH:
            node = node.func.value
            continue
        return None
    return None


def _local_root(node: ast.AST) -> ast.Name | None:
    """The local name an argument reads through shape / dtype views (`logits.view(-1, v).float()` -> `logits`)."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _THROUGH:
        node = node.func.value
    return node if isinstance(node, ast.Name) else None


def _leaf(node: ast.AST) -> str:
    while isinstance(node, (ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
        if isinstance(node, ast.Attribute) and node.attr in ("float", "to", "view", "reshape", "contiguous"):
            node = node.value
    return last_name(node) or ""


def _in_no_grad(func: ast.AST, call: ast.AST) -> bool:
    for w in _walk(func):
        if isinstance(w, ast.With) and any(
            last_name(i.context_expr.func if isinstance(i.context_expr, ast.Call) else i.context_expr)
            in ("no_grad", "inference_mode")
            for i in w.items
        ):
            if any(n is call for n in _walk(w)):
                return True
    return False


def _outside_objective(func: ast.AST, call: ast.Call) -> bool:
    """The loss call's result lands in a local that never reaches what the function returns or back-propagates
    (`per_token_loss = cross_entropy(logits.detach(), ..., reduction="none")` handed to a statistics meter): a
    measurement, not a term of the objective."""
    target = assigned_name(func, call)
    if target is None:
        return False
    reached: set[str] = set()
    for n in _walk(func):
        if isinstance(n, (ast.Return, ast.Yield)) and n.value is not None:
            reached.update(m.id for m in _walk(n.value) if isinstance(m, ast.Name))
        elif isinstance(n, ast.Call) and last_name(n.func) == "backward":
            reached.update(m.id for m in _walk(n) if isinstance(m, ast.Name))
        elif isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and n.value is not None:
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            if any(
                not isinstance(t, ast.Name) for t in targets
            ):  # `self.loss = ...`: kept beyond the function
                reached.update(m.id for m in _walk(n.value) if isinstance(m, ast.Name))
    changed = True
    while changed:
        changed = False
        for n in _walk(func):
            if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)) and n.value is not None:
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                names = {m.id for t in targets for m in _walk(t) if isinstance(m, ast.Name)}
                if names & reached:
                    new = {m.id for m in _walk(n.value) if isinstance(m, ast.Name)} - reached
                    if new:
                        reached |= new
                        changed = True
    return target not in reached


def detached_predictions(func: ast.FunctionDef | ast.AsyncFunctionDef) -> list[tuple[ast.AST, str, str]]:
    """(site, callee, argument) for each loss call of ``func`` fed a detached prediction."""
    if _NOT_TRAINING.search(func.name):
        return []
    detached_locals: dict[str, ast.AST] = {}
    for n in _walk(func):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            root = _detached_root(n.value)
            if root is not None:
                detached_locals[n.targets[0].id] = root
    found = []
    for call in _walk(func):
        if not isinstance(call, ast.Call):
            continue
        callee = last_name(call.func) or ""
        if not _is_loss_callee(callee):
            continue
        candidates: list[tuple[str, ast.AST]] = [(kw.arg, kw.value) for kw in call.keywords if kw.arg]
        if call.args and not isinstance(call.args[0], ast.Starred):
            candidates.append(("", call.args[0]))
        for key, value in candidates:
            root = _detached_root(value)
            name = _leaf(root) if root is not None else ""
            local = _local_root(value)
            if root is None and local is not None and local.id in detached_locals:
                # `logits = self.lm_head(h).detach()`, then `cross_entropy(logits.view(-1, v), ...)`: the local
                # names the prediction, whatever the detached expression's own leaf is (`lm_head`)
                root = detached_locals[local.id]
                name = local.id if _PREDICTION.search(local.id) else _leaf(root)
            if root is None:
                continue
            if "teacher" in (key + name).lower() or "target" in (key + name).lower():
                continue
            if key and not _PREDICTION.search(key):
                continue
            if not key and not (_PREDICTION.search(name) and "loss" not in name.lower()):
                continue
            if _in_no_grad(func, call) or _outside_objective(func, call):
                continue
            found.append((value, callee, ast.unparse(value)))
    return found


class LossPredictionDetached(Rule):
    code = "NPU470"
    name = "loss-prediction-detached"
    summary = (
        "A loss call is fed a detached prediction (`hidden_states=hidden_states.detach()`, "
        "`cross_entropy(logits.detach(), labels)`): the loss no longer back-propagates into the model."
    )
    why = (
        "A training loss differentiates its prediction argument: the hidden states of a fused linear "
        "cross-entropy (the NPU chunk loss, Liger), the logits of a cross-entropy, the prediction of an MSE or KL "
        "term. A `.detach()` on that argument cuts the graph there: the loss value is unchanged (the same "
        "number is logged on both devices) but no gradient reaches the layers before it, so only what the loss "
        "kernel owns (the lm_head weight) trains, typically on one backend's branch only. Detaching a target "
        "or a teacher is the documented pattern and is not reported; nor is a loss computed under "
        "`torch.no_grad()` or in an evaluation / metric / logging function. Checked in every function of any "
        "file: a call whose name says loss (or a torch loss function) given, as a prediction-named keyword "
        "(`hidden_states`, `logits`, `input`, `*pred*`) or as its first argument named so, a value written "
        "`x.detach()` or bound to one in the function (`logits = self.lm_head(h).detach()`, read directly or "
        "through views: `cross_entropy(logits.view(-1, v), ...)`)."
    )
    bad = (
        Example(
            """
            def forward(self, input_ids, labels=None, **kwargs):
                hidden_states = self.model(input_ids, **kwargs).last_hidden_state
                loss, logits = self.loss_function(
                    hidden_states=hidden_states.detach(), weights=self.lm_head.weight, labels=labels
                )
                return loss, logits
            """,
            path="veomni/models/transformers/toy/generated/patched_modeling_toy_npu.py",
        ),
    )
    good = (
        Example(
            """
            def forward(self, input_ids, labels=None, teacher_logits=None, **kwargs):
                hidden_states = self.model(input_ids, **kwargs).last_hidden_state
                logits = self.lm_head(hidden_states)
                loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten())
                loss = loss + self.distill_loss(logits, teacher_logits.detach())
                return loss, logits
            """,
            path="veomni/models/transformers/toy/generated/patched_modeling_toy_npu.py",
        ),
    )
    fix_safety = (
        "No fix: drop the detach unless the backbone is meant to be frozen (then freeze it explicitly)."
    )
    requires = ("detach", ("loss", "cross_entropy", "kl_div"))
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def finish(self) -> None:
        for func in functions_of(self.ctx.tree, self.ctx.source.text, "detach"):
            for site, callee, shown in detached_predictions(func):
                if first_report(self, site):
                    self.report(
                        site,
                        f"`{callee}` is given `{shown}`, a detached prediction: the loss reaches no parameter "
                        "before it (only what the loss itself owns trains); pass the value undetached",
                    )
