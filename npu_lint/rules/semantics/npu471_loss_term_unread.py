"""NPU471 loss-term-unread."""

from __future__ import annotations

import ast
import re

from npu_lint.core.astutil import last_name
from npu_lint.core.astutil import walk as _walk
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.semantics._shared import first_report, functions_of

# a local named as a term of an objective: `kl_loss`, `aux_loss`, `z_loss`, `kl`, `kld`, `commitment`
_TERM = re.compile(r"loss|(^|_)kld?($|_)|(^|_)kl_div|commitment|penalty", re.IGNORECASE)


def _is_term(name: str) -> bool:
    return bool(_TERM.search(name)) and not name.startswith("_")


# what a value is, read from the value itself (the local is never read, so its binding is all there is to go by)
_HOST = frozenset({"item", "tolist", "numpy", "detach"})  # a logged copy, out of the autograd graph
_BUILTINS = frozenset(
    {
        "float",
        "int",
        "bool",
        "str",
        "len",
        "round",
        "repr",
        "format",
        "dict",
        "list",
        "tuple",
        "set",
        "sorted",
    }
)
_MAKERS = frozenset({"partial", "getattr"})  # a callable or an attribute looked up, not a tensor
_FACTORIES = frozenset(
    {
        "zeros",
        "ones",
        "empty",
        "full",
        "zeros_like",
        "ones_like",
        "empty_like",
        "full_like",
        "arange",
        "tensor",
    }
)
_MASKS = frozenset({"ne", "eq", "gt", "ge", "lt", "le", "logical_not", "logical_and", "logical_or", "bool"})
_CASTS = frozenset(
    {"float", "half", "bfloat16", "long", "int", "to", "type_as", "view", "reshape", "flatten"}
)
_SETTINGS = ("config", "cfg", "args", "hparams", "conf")
_DISPLAYS = (
    ast.Dict,
    ast.List,
    ast.Set,
    ast.Tuple,
    ast.ListComp,
    ast.DictComp,
    ast.SetComp,
    ast.GeneratorExp,
    ast.JoinedStr,
    ast.Lambda,
    ast.Compare,
    ast.BoolOp,
)


def _root(node: ast.AST) -> tuple[ast.AST, list[str]]:
    """The root of an attribute / subscript chain and the attribute names along it."""
    attrs: list[str] = []
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Attribute):
            attrs.append(node.attr)
        node = node.value
    return node, attrs


def _locals_of(func: ast.AST) -> set[str]:
    """Names the function binds itself (assignments, loop and `with` targets, parameters)."""
    out: set[str] = set()
    for n in _walk(func):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            out.add(n.id)
        elif isinstance(n, ast.arg):
            out.add(n.arg)
    return out


def _bound(target: ast.AST, value: ast.AST) -> list[tuple[ast.Name, ast.AST | None]]:
    """The names a target binds and the value each receives (None: an element of a call's results)."""
    if isinstance(target, ast.Name):
        return [(target, value)]
    if isinstance(target, (ast.Tuple, ast.List)):
        elts = getattr(value, "elts", None)
        if isinstance(value, (ast.Tuple, ast.List)) and elts is not None and len(elts) == len(target.elts):
            return [pair for t, v in zip(target.elts, elts, strict=True) for pair in _bound(t, v)]
        return [(name, None) for name in _targets(target)]
    if isinstance(target, ast.Starred):
        return [(name, None) for name in _targets(target.value)]
    return []


def _kwargs_param(func: ast.AST) -> str | None:
    kwarg = getattr(getattr(func, "args", None), "kwarg", None)
    return kwarg.arg if kwarg is not None else None


def computes_term(value: ast.AST, func: ast.AST, own: set[str]) -> bool:
    """Whether a value bound to a loss-named local is a tensor the function computes for its objective (a loss
    call's result, arithmetic, an output read off a result), not a setting, a mask, a logged copy, a container, a
    callable or an input taken out of the way: decided by what flows into the local, since it is never read."""
    while (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr in _CASTS
        and isinstance(value.func.value, (ast.Compare, ast.BoolOp, ast.Call))
    ):
        value = value.func.value  # `(labels != -100).float()`: what is cast is what it is
    if isinstance(value, ast.Constant) or isinstance(value, _DISPLAYS):
        return False  # a literal, a container, a comparison (a mask), a string, a lambda
    if isinstance(value, ast.BinOp) and isinstance(value.op, (ast.BitAnd, ast.BitOr, ast.BitXor)):
        return False  # masks combined: `attention_mask & (labels != -100)`
    if isinstance(value, ast.UnaryOp) and isinstance(value.op, (ast.Invert, ast.Not)):
        return False  # a mask inverted
    if isinstance(value, (ast.BinOp, ast.UnaryOp, ast.IfExp, ast.Await, ast.NamedExpr)):
        return True
    if isinstance(value, ast.Call):
        callee = value.func
        name = last_name(callee) or ""
        if name in _HOST or name in _MASKS or name in _MAKERS or name in _FACTORIES:
            return False
        if isinstance(callee, ast.Name) and (callee.id in _BUILTINS or callee.id in _MAKERS):
            return False
        if name[:1].isupper():
            return False  # a class instantiated: a loss module, a config object, not a tensor
        if name == "pop":
            return False  # taken out of a mapping so it is not handed on (`kwargs.pop("loss_mask")`)
        if isinstance(callee, ast.Attribute) and name in ("get", "setdefault"):
            root, _attrs = _root(callee.value)
            if isinstance(root, ast.Name) and root.id == _kwargs_param(func):
                return False  # an input read out of `**kwargs`
        return True
    if isinstance(value, (ast.Attribute, ast.Subscript, ast.Name)):
        root, attrs = _root(value)
        if any(a.lower().endswith(_SETTINGS) for a in attrs):
            return False  # a hyperparameter: `self.config.loss_weight`
        if not isinstance(root, ast.Name):
            return True  # read off a call's result: `self.head(x).aux_loss`
        if root.id == "self" or root.id.lower().endswith(_SETTINGS):
            return False  # a module, a bound method or a setting of the object, read without being run
        if root.id == _kwargs_param(func):
            return False  # an input read out of `**kwargs`
        return root.id in own  # read off a value of this function; a module-level name is not
    return True


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
    own: set[str] | None = None

    def term(value: ast.AST | None) -> bool:
        nonlocal own
        if value is None:
            return True  # one of a call's results (`embeds, kl_loss = self.proj_head(x)`): an output
        if own is None:
            own = _locals_of(func)
        return computes_term(value, func, own)

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
                stores.extend((name, n) for name, v in _bound(t, value) if _is_term(name.id) and term(v))
        elif isinstance(n, ast.AnnAssign) and n.value is not None:
            stores.extend((name, n) for name, v in _bound(n.target, n.value) if _is_term(name.id) and term(v))
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
        "tuple unpack (also an inline term: `kld = -0.5 * (1 + logvar - mu**2 - logvar.exp()).mean()`), never read "
        "in the function (nested functions included), while the function reads another loss-named value. Whether "
        "the local holds a term is read from what flows into it, whatever its name: a loss call's result, "
        "arithmetic, one of a call's results or an output read off one is a term (`loss_weights = "
        "self.token_weights(labels)` thrown away drops the weighting too); a setting (`self.config.loss_weight`), a "
        "mask (a comparison, `.ne(...)`, `&`), a logged copy (`.item()`, `.detach()`), a container, a callable "
        "(`nn.CrossEntropyLoss()`, `partial(...)`, `F.cross_entropy`) or an input taken out of `**kwargs` is not. "
        "A combined sum (arithmetic that reads other loss terms) stored and dropped is NPU425."
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
                        "the loss the function hands on (the regulariser, or the weighting it carries, is thrown "
                        "away); add it to the loss, or name it `_...` if it is meant to be dropped",
                    )
