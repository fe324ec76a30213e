"""NPU471 loss-term-unread."""

from __future__ import annotations

import ast
import re

from npu_lint.core.astutil import walk as _walk
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.semantics._shared import first_report, functions_of

# a local named as a term of an objective: `kl_loss`, `aux_loss`, `z_loss`, `kl`, `kld`, `commitment`
_TERM = re.compile(r"loss|(^|_)kld?($|_)|(^|_)kl_div|commitment|penalty", re.IGNORECASE)
_CALLABLE = (
    "_fn",
    "_func",
    "_fct",
    "_function",
    "_cls",
    "_class",
    "_type",
    "_name",
    "_key",
    "_keys",
    "_names",
    # what a loss is weighted, masked or logged with, not a term of it (`loss_mask = kwargs.pop("loss_mask")`)
    "_mask",
    "_weight",
    "_weights",
    "_scale",
    "_coef",
    "_coeff",
    "_factor",
    "_value",
    "_item",
    "_dict",
    "_stats",
    "_info",
    "_log",
    "_logs",
)


def _is_term(name: str) -> bool:
    return bool(_TERM.search(name)) and not name.startswith("_") and not name.lower().endswith(_CALLABLE)


def _targets(node: ast.AST) -> list[ast.Name]:
    if isinstance(node, ast.Name):
        return [node]
    if isinstance(node, (ast.Tuple, ast.List)):
        return [n for e in node.elts for n in _targets(e)]
    if isinstance(node, ast.Starred):
        return _targets(node.value)
    return []


def unread_terms(func: ast.FunctionDef | ast.AsyncFunctionDef) -> list[tuple[ast.AST, ast.AST]]:
    """(site, binding statement) for each loss-term local of ``func`` computed and never read, when the function
    hands on another loss (reads a different loss-named local); the site is the later sum of loss terms that
    omits it when there is one, else the binding."""
    loads: set[str] = set()
    stores: list[tuple[ast.Name, ast.AST]] = []
    for n in _walk(func):
        if isinstance(n, (ast.Global, ast.Nonlocal)):
            return []
        if (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name)
            and n.func.id in ("locals", "vars", "exec", "eval")
        ):
            return []
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Load, ast.Del)):
            loads.add(n.id)  # `del aux_loss`: dropped on purpose
        elif isinstance(n, ast.Assign):
            value = n.value
            if isinstance(value, ast.Constant):
                continue
            if (
                isinstance(value, (ast.BinOp, ast.UnaryOp))
                and len(n.targets) == 1
                and isinstance(n.targets[0], ast.Name)
                and any(isinstance(x, ast.Name) and _is_term(x.id) for x in _walk(value))
            ):
                continue  # a combined loss (arithmetic of loss terms) stored and dropped is NPU425's
            for t in n.targets:
                stores.extend((name, n) for name in _targets(t) if _is_term(name.id))
        elif isinstance(n, ast.AnnAssign) and n.value is not None and not isinstance(n.value, ast.Constant):
            stores.extend((name, n) for name in _targets(n.target) if _is_term(name.id))
    if not stores:
        return []
    handed_on = {name for name in loads if "loss" in name.lower()}
    found = []
    for target, stmt in stores:
        if target.id in loads or not (handed_on - {target.id}):
            continue
        found.append((_total_after(func, stmt) or target, stmt))
    return found


def _total_after(func: ast.AST, stmt: ast.AST) -> ast.AST | None:
    """The last sum of loss terms assigned to a loss-named local after ``stmt``: where the term was meant to be
    added (`loss = mse_loss + diff_loss`)."""
    best = None
    for n in _walk(func):
        if (
            isinstance(n, ast.Assign)
            and n.lineno > getattr(stmt, "end_lineno", stmt.lineno)
            and len(n.targets) == 1
            and isinstance(n.targets[0], ast.Name)
            and "loss" in n.targets[0].id.lower()
            and isinstance(n.value, ast.BinOp)
            and isinstance(n.value.op, ast.Add)
            and sum(isinstance(x, ast.Name) and "loss" in x.id.lower() for x in _walk(n.value)) >= 2
        ):
            if best is None or n.lineno > best.lineno:
                best = n
    return best


def _name_in(stmt: ast.AST, _site: ast.AST) -> str:
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
    names = [n.id for t in targets if t is not None for n in _targets(t) if _is_term(n.id)]
    return names[0] if names else "?"


class LossTermUnread(Rule):
    code = "NPU471"
    name = "loss-term-unread"
    summary = (
        "A loss term (`kl_loss`, `aux_loss`, `commitment`) is computed in a function that hands on a loss, "
        "and is never read: the regulariser is thrown away."
    )
    why = (
        "A training forward that computes a KL regulariser, an auxiliary (load-balancing, z-) loss or a "
        "commitment term computes it to add it to the loss it returns. When the local that receives the term is "
        "never read again (`embeds, kl_loss = self.proj_head(x)` and a total of the other terms), the code "
        "still computes it on both devices, but the objective silently changes: the posterior variance, the "
        "router balance or the codebook commitment is no longer constrained, with no error. Checked in every "
        "function of any file: a local named as a loss term (`loss`, `kl`, `kld`, `kl_div`, `commitment`, "
        "`penalty` in its name; a name starting with `_` is a deliberate discard) bound by an assignment or a "
        "tuple unpack (also an inline term: `kld = -0.5 * (1 + logvar - mu**2 - logvar.exp()).mean()`), never read in the function (nested functions included), while the function reads another "
        "loss-named value. A combined sum (arithmetic that reads other loss terms) stored and dropped is NPU425."
    )
    bad = (
        Example(
            """
            def lm_head(self, hidden_states, labels=None):
                pred = self.gen_head(hidden_states)
                mse_loss = F.mse_loss(pred, labels)
                embeds, kl_loss = self.proj_head(pred)
                diff_loss = self.diffusion_loss(embeds)
                loss = mse_loss + diff_loss
                return loss
            """,
            path="veomni/models/seed_omni/decoder/toy_edit/modeling_toy_edit.py",
        ),
    )
    good = (
        Example(
            """
            def lm_head(self, hidden_states, labels=None):
                pred = self.gen_head(hidden_states)
                mse_loss = F.mse_loss(pred, labels)
                embeds, _kl_loss = self.proj_head(pred)
                diff_loss = self.diffusion_loss(embeds)
                loss = mse_loss + diff_loss
                return loss
            """,
            path="veomni/models/seed_omni/decoder/toy_edit/modeling_toy_edit.py",
            title="a term discarded on purpose is named with a leading underscore",
        ),
    )
    fix_safety = "No fix: add the term to the returned loss, or name it `_...` if dropping it is intended."
    requires = (("loss", "kl", "commitment", "penalty"),)
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def finish(self) -> None:
        for func in functions_of(self.ctx.tree, self.ctx.source.text, "loss"):
            for site, stmt in unread_terms(func):
                name = site.id if isinstance(site, ast.Name) else _name_in(stmt, site)
                where = (
                    ""
                    if isinstance(site, ast.Name)
                    else f" (computed at line {stmt.lineno}; this total omits it)"
                )
                if first_report(self, site):
                    self.report(
                        site,
                        f"`{name}` is a loss term computed in `{func.name}` and never read{where}: it never reaches "
                        "the loss the function hands on (the regulariser is thrown away); add it to the loss, or "
                        "name it `_...` if it is meant to be dropped",
                    )
