"""The save and load sides of a checkpoint ``Stateful`` (a class with ``state_dict()`` and ``load_state_dict(sd)``).

DCP saves what ``state_dict()`` returns and, on resume, hands ``load_state_dict`` the same structure back. VeOmni's
``ModelState`` / ``OptimizerState`` wrap a model or optimizer this way; a refactor that changes one side (the
save stops wrapping the dict in ``{"model": ...}``, the load still indexes ``state_dict["model"]``) passes every
save and fails the first resume with ``KeyError``.

* ``saved_shapes(method)``: what every return of ``state_dict`` hands DCP: a set of literal keys (a dict display,
  ``get_optimizer_state_dict``'s ``state`` / ``param_groups``), or ``FLAT`` (``get_model_state_dict``: parameter
  names, dotted); None when any return is something else.
* ``key_faults(cls)``: the load side's reads of the incoming dict that no save shape provides: a literal key
  subscripted (``sd["model"]``) that no shape has, or the whole dict handed to ``set_model_state_dict`` where
  every shape wraps it under literal keys.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from npu_lint.core.astutil import call_name, keyword_arg, own_nodes, str_value

__all__ = ["FLAT", "KeyFault", "key_faults", "saved_shapes"]

FLAT = "flat"  # a model state dict: keys are parameter and buffer names (`layers.0.mlp.weight`)
# what the distributed state-dict helpers return (torch.distributed.checkpoint.state_dict)
_PRODUCERS: dict[str, frozenset[str] | str] = {
    "get_model_state_dict": FLAT,
    "get_optimizer_state_dict": frozenset({"state", "param_groups"}),
}
_SETTERS = {
    "set_model_state_dict": ("model_state_dict", 1),
    "set_optimizer_state_dict": ("optim_state_dict", 2),
}

Shape = frozenset[str] | str


@dataclass(frozen=True)
class KeyFault:
    node: ast.AST  # the load side's read
    key: str | None  # the literal key read, None when the whole dict is handed on
    shapes: tuple[Shape, ...]  # what the save side returns


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    for stmt in cls.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == name:
            return stmt
    return None


def _params(func: ast.FunctionDef) -> list[str]:
    return [a.arg for a in func.args.posonlyargs + func.args.args]


def _value_shape(value: ast.expr, name: str | None) -> Shape | None | bool:
    """A dict display's keys, a producer's shape; True for a call handed the returned name itself (a transform
    of the same dict, keys kept); None for anything else."""
    if isinstance(value, ast.Dict):
        keys = [str_value(k) if k is not None else None for k in value.keys]
        if any(k is None for k in keys):
            return None
        return frozenset(k for k in keys if k is not None)
    if isinstance(value, ast.Call):
        produced = _PRODUCERS.get(call_name(value))
        if produced is not None:
            return produced
        if name is not None and any(
            isinstance(a, ast.Name) and a.id == name
            for a in [*value.args, *(k.value for k in value.keywords)]
        ):
            return True
    return None


def saved_shapes(method: ast.FunctionDef) -> tuple[Shape, ...] | None:
    """What every return of ``method`` (a ``state_dict``) hands on; None when one is not read."""
    nodes = own_nodes(method)
    returns = [n for n in nodes if isinstance(n, ast.Return)]
    if not returns:
        return None
    shapes: list[Shape] = []
    for ret in returns:
        if ret.value is None:
            return None
        if isinstance(ret.value, ast.Name):
            name = ret.value.id
            bound = []
            for n in nodes:
                if isinstance(n, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == name for t in n.targets
                ):
                    if len(n.targets) != 1:
                        return None
                    bound.append(n.value)
                elif isinstance(n, (ast.AugAssign, ast.AnnAssign, ast.For, ast.With, ast.NamedExpr)):
                    target = getattr(n, "target", None)
                    if isinstance(target, ast.Name) and target.id == name:
                        return None
            # every other read of the name is the return or an argument of its own rebinding: a dict filled
            # in place (`state["buffer"] = ...`, `state.update(...)`, a helper handed it) is not read
            allowed = {id(r.value) for r in returns} | {
                id(a)
                for v in bound
                if isinstance(v, ast.Call)
                for a in [*v.args, *(k.value for k in v.keywords)]
            }
            if any(
                isinstance(n, ast.Name)
                and n.id == name
                and isinstance(n.ctx, ast.Load)
                and id(n) not in allowed
                for n in nodes
            ):
                return None
            found = [s for s in (_value_shape(v, name) for v in bound) if s is not True]
            if not bound or not found or any(s is None for s in found):
                return None
            shapes.extend(s for s in found if isinstance(s, (frozenset, str)))
        else:
            shape = _value_shape(ret.value, None)
            if not isinstance(shape, (frozenset, str)):
                return None
            shapes.append(shape)
    return tuple(dict.fromkeys(shapes))


def _provides(shape: Shape, key: str) -> bool:
    if shape == FLAT:
        return "." in key  # a whole model's state dict holds dotted names only
    return key in shape


def _aliases(nodes: list[ast.AST], incoming: str) -> set[str]:
    """Locals bound to the incoming dict itself (`model_state_dict = state_dict`), every other binding of them a
    call handed them (a transform that keeps the keys)."""
    bindings: dict[str, list[ast.expr]] = {}
    for n in nodes:
        if isinstance(n, ast.Assign):
            for t in n.targets:
                if isinstance(t, ast.Name):
                    bindings.setdefault(t.id, []).append(n.value)
        elif isinstance(n, (ast.AugAssign, ast.AnnAssign, ast.For, ast.With, ast.NamedExpr)):
            target = getattr(n, "target", None)
            if isinstance(target, ast.Name):
                bindings.setdefault(target.id, []).append(n)  # type: ignore[arg-type]
    out = set()
    for name, values in bindings.items():
        if name == incoming or not any(isinstance(v, ast.Name) and v.id == incoming for v in values):
            continue
        if all(
            (isinstance(v, ast.Name) and v.id == incoming) or _value_shape(v, name) is True for v in values
        ):
            out.add(name)
    return out


def key_faults(cls: ast.ClassDef) -> list[KeyFault]:
    save, load = _method(cls, "state_dict"), _method(cls, "load_state_dict")
    if save is None or load is None or _params(save) != ["self"]:
        return []
    params = _params(load)
    if len(params) != 2 or load.args.vararg or load.args.kwarg:
        return []
    incoming = params[1]
    nodes = own_nodes(load)
    if any(
        isinstance(n, ast.Name) and n.id == incoming and isinstance(n.ctx, (ast.Store, ast.Del))
        for n in nodes
    ):
        return []  # rebound: the reads below may be of another dict
    shapes = saved_shapes(save)
    if not shapes:
        return []
    names = {incoming} | _aliases(nodes, incoming)
    tested: set[str] = set()  # `"model" in state_dict`: the load copes with both shapes
    for n in nodes:
        if (
            isinstance(n, ast.Compare)
            and isinstance(n.comparators[-1], ast.Name)
            and n.comparators[-1].id in names
            and isinstance(n.ops[-1], (ast.In, ast.NotIn))
        ):
            key = str_value(n.left)
            if key is not None:
                tested.add(key)
    faults: list[KeyFault] = []
    for n in nodes:
        key: str | None = None
        if (
            isinstance(n, ast.Subscript)
            and isinstance(n.ctx, ast.Load)
            and isinstance(n.value, ast.Name)
            and n.value.id in names
        ):
            key = str_value(n.slice)
        if key is not None and key not in tested and not any(_provides(s, key) for s in shapes):
            faults.append(KeyFault(n, key, shapes))
            continue
        if (
            isinstance(n, ast.Call)
            and call_name(n) in _SETTERS
            and all(isinstance(s, frozenset) for s in shapes)
        ):
            keyword, index = _SETTERS[call_name(n)]
            handed = keyword_arg(n, keyword)
            if handed is None and len(n.args) > index:
                handed = n.args[index]
            wanted = _PRODUCERS["get_optimizer_state_dict"] if keyword == "optim_state_dict" else None
            if isinstance(handed, ast.Name) and handed.id in names and all(s != wanted for s in shapes):
                faults.append(KeyFault(n, None, shapes))
    return faults
