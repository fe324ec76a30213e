"""RMSNorm semantics: what a registry variant computes, and what a model's RMSNorm class computes.

Two questions, each behind one function, so the rules never hard-code variant names:

* ``rms_variant_contract(project, variant)``: the contract of a registered ``rms_norm`` variant,
  ``"offset"`` (the op computes ``norm(x) * (1 + weight)``; VeOmni's trees call it ``qwen3_5``, some catalogs
  ``offset``), ``"standard"`` (``norm(x) * weight``), ``"unweighted"`` (no weight), or None (unknown variant).
  ``variant_for_contract`` is the inverse: the name the tree's own registry gives a contract.
* ``class_rms_contract(init, forward)`` / ``upstream_rms_contract(module, cls)``: what an RMSNorm class does,
  read statically: the weight's initialiser (zeros / ones), whether ``forward`` multiplies by ``1 + weight``,
  the attribute holding eps, and whether it upcasts to fp32.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import os
import re
from dataclasses import dataclass

from npu_lint.core.astutil import call_name, int_value, nodes_of
from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (faster)
from npu_lint.veomni.catalog import OpRow
from npu_lint.veomni.project import Project
from npu_lint.veomni.upstream import last_name, upstream_class_method

__all__ = [
    "EPS_NAMES",
    "OFFSET",
    "STANDARD",
    "UNWEIGHTED",
    "RmsContract",
    "rms_variant_contract",
    "variant_for_contract",
    "param_init_kind",
    "fill_kind",
    "class_rms_contract",
    "upstream_rms_contract",
    "KernelFunction",
    "kernel_function",
    "function_kernel",
    "call_flags",
    "class_contract_of",
    "defines_norm_class",
    "weight_init_faults",
    "init_weights_fills",
    "unread_weights",
]

_NORM_CLASS = re.compile(r"^class\s+\w*Norm\b", re.M)


def defines_norm_class(text: str) -> bool:
    """Whether a module's text may define a top-level ``*Norm`` class (a top-level class statement starts its
    line with ``class``): a cheap pre-check, true of every module that does. The NPU40x rules read such classes
    from the sibling files of a kernel wrapper, so the file pass shares these files' trees
    (``engine.lint.check_source``) and they are parsed once per run."""
    return "Norm" in text and _NORM_CLASS.search(text) is not None


OFFSET = "offset"
STANDARD = "standard"
UNWEIGHTED = "unweighted"

# variant names by contract, as VeOmni's trees and catalogs spell them (the tree's own rows decide which exist)
_NAMES: dict[str, str] = {
    "qwen3_5": OFFSET,
    "offset": OFFSET,
    "gemma": OFFSET,
    "standard": STANDARD,
    "unweighted": UNWEIGHTED,
}
_OPSLOT_NAMES = {OFFSET: "qwen3_5", STANDARD: "standard", UNWEIGHTED: "unweighted"}
EPS_NAMES = ("variance_epsilon", "eps", "epsilon", "norm_eps", "layer_norm_eps")
_EPS_NAMES = EPS_NAMES


def _rms_variants(rows: tuple[OpRow, ...]) -> list[str]:
    out: list[str] = []
    for row in rows:
        if row.op == "rms_norm" and row.variant not in out:
            out.append(row.variant)
    return out


def rms_variant_contract(project: Project | None, variant: str | None) -> str | None:
    """The contract of ``rms_norm/<variant>``: "offset" | "standard" | "unweighted" | None (unknown)."""
    if variant is None:
        return None
    return _NAMES.get(variant)


def variant_for_contract(project: Project, contract: str, kind: str = "VeomniOp") -> str:
    """The variant name the project's registry gives ``contract`` (an OpSlot handle: the slot name): the tree's
    own registrations first, then the API profile's offset variant, then the project's rows (the catalog)."""
    if kind == "OpSlot":
        for name in _rms_variants(project.slot_rows):
            if _NAMES.get(name) == contract:
                return name
        return _OPSLOT_NAMES[contract]
    for name in _rms_variants((*project.registered, *project.slot_rows)):
        if _NAMES.get(name) == contract:
            return name
    if contract == OFFSET:  # no tree rows: the project's API profile names it (veomni.profile)
        return project.api.offset_rms_variant
    for name in _rms_variants(tuple(project.rows_for("rms_norm"))):
        if _NAMES.get(name) == contract:
            return name
    return contract


# -- what a class does ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RmsContract:
    """What an RMSNorm class computes. None: not read (the part is absent or not recognisable)."""

    weight_init: str | None  # "zeros" | "ones" | "other" | None
    offset: bool | None  # forward multiplies by `1 + weight`
    eps_attr: str | None  # the attribute holding eps: "variance_epsilon", "eps", ...
    upcast: bool | None  # forward computes in fp32

    @property
    def gemma_style(self) -> bool:
        return self.weight_init == "zeros" or self.offset is True

    @property
    def standard_style(self) -> bool:
        return self.weight_init == "ones" and self.offset is not True


def _self_target(node: ast.AST, attr: str | None = None) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        if attr is None or node.attr == attr:
            return node.attr
    return None


def param_init_kind(func: ast.AST, attr: str) -> str | None:
    """How ``func`` initialises ``self.<attr>``: "zeros", "ones", "other", or None when it does not set it.
    A parameter created empty and filled in the same function (`nn.init.zeros_(self.weight)`,
    `self.weight.data.fill_(1.0)`) counts as what it is filled with."""
    for node in _walk(func):
        if not isinstance(node, ast.Assign) or not any(_self_target(t, attr) for t in node.targets):
            continue
        value = node.value
        made = None
        if isinstance(value, ast.Call) and last_name(value.func) == "Parameter" and value.args:
            inner = value.args[0]
            name = last_name(inner.func) if isinstance(inner, ast.Call) else None
            if name in ("zeros", "zeros_like", "new_zeros"):
                made = "zeros"
            elif name in ("ones", "ones_like", "new_ones"):
                made = "ones"
            elif name in ("full", "new_full") and isinstance(inner, ast.Call) and len(inner.args) >= 2:
                made = _fill_kind(inner.args[1])
        # filled in place after it is made (`torch.ones(d)` then `self.weight.data.zero_()`): the fill is the value
        return fill_kind(func, attr) or made or "other"
    return None


def _fill_kind(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return "zeros" if node.value == 0 else "ones" if node.value == 1 else None
    return None


def fill_kind(func: ast.AST, attr: str) -> str | None:
    """What ``func`` fills ``self.<attr>`` with in place: `nn.init.zeros_(self.w)`, `nn.init.ones_(self.w)`,
    `nn.init.constant_(self.w, 1.0)`, `self.w.data.zero_()`, `self.w.fill_(1)` ("zeros" | "ones" | None)."""
    for node in _walk(func):
        if not isinstance(node, ast.Call):
            continue
        name = last_name(node.func)
        if name in ("zeros_", "ones_", "constant_") and node.args:
            target = node.args[0]
            if isinstance(target, ast.Attribute) and target.attr == "data":
                target = target.value
            if _self_target(target, attr):
                if name == "constant_":
                    return _fill_kind(node.args[1]) if len(node.args) > 1 else None
                return "zeros" if name == "zeros_" else "ones"
        elif name in ("zero_", "fill_") and isinstance(node.func, ast.Attribute):
            target = node.func.value
            if isinstance(target, ast.Attribute) and target.attr == "data":
                target = target.value
            if _self_target(target, attr):
                if name == "zero_":
                    return "zeros"
                return _fill_kind(node.args[0]) if node.args else None
    return None


def _is_one(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) in (int, float) and node.value == 1


def _strip_casts(node: ast.AST) -> ast.AST:
    while (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr
        in (
            "float",
            "to",
            "type_as",
            "type",
            "clone",
            "detach",
            "contiguous",
        )
    ):
        node = node.func.value
    return node


def _plus_one(node: ast.AST) -> ast.AST | None:
    """The operand a node adds 1 to, in any spelling: ``1 + w``, ``w + 1.0``, ``w.add(1)`` / ``w.add_(1)``,
    ``torch.add(w, 1)`` (``alpha`` left at 1); None for anything else."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        if _is_one(node.left):
            return node.right
        if _is_one(node.right):
            return node.left
        return None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return None
    if node.func.attr not in ("add", "add_") or any(k.arg not in ("other", "alpha") for k in node.keywords):
        return None
    alpha = next((k.value for k in node.keywords if k.arg == "alpha"), None)
    if alpha is not None and not _is_one(alpha):
        return None
    other = next((k.value for k in node.keywords if k.arg == "other"), None)
    receiver = node.func.value
    if isinstance(receiver, ast.Name) and receiver.id == "torch":  # torch.add(w, 1) / torch.add(1, w)
        args = [*node.args, *([other] if other is not None else [])]
        if len(args) != 2:
            return None
        return args[1] if _is_one(args[0]) else args[0] if _is_one(args[1]) else None
    if other is None and len(node.args) == 1:
        other = node.args[0]
    return receiver if other is not None and _is_one(other) else None


def _is_offset_weight(node: ast.AST) -> bool:
    operand = _plus_one(_strip_casts(node))
    return operand is not None and _self_target(_strip_casts(operand), "weight") is not None


def _eps_attr(init: ast.AST | None, forward: ast.AST | None) -> str | None:
    used: list[str] = []
    if forward is not None:
        for node in _walk(forward):
            name = _self_target(node)
            if name in _EPS_NAMES and name not in used:
                used.append(name)
    if len(used) == 1:
        return used[0]
    if init is not None:
        for node in _walk(init):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    name = _self_target(target)
                    if name in _EPS_NAMES:
                        return name
    return used[0] if used else None


def class_rms_contract(init: ast.AST | None, forward: ast.AST | None) -> RmsContract:
    """The contract of an RMSNorm class from its ``__init__`` and ``forward`` (either may be None)."""
    weight_init = param_init_kind(init, "weight") if init is not None else None
    offset: bool | None = None
    upcast: bool | None = None
    if forward is not None:
        offset = False
        upcast = False
        for node in _walk(forward):
            if _is_offset_weight(node):
                offset = True
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr == "float" and not node.args:
                    upcast = True
            elif isinstance(node, ast.Attribute) and node.attr == "float32":
                upcast = True  # .to(torch.float32), .to(dtype=torch.float32), .type(torch.float32)
        uses_weight = any(_self_target(n, "weight") for n in _walk(forward))
        if not uses_weight:
            offset = None
    return RmsContract(weight_init, offset, _eps_attr(init, forward), upcast)


def upstream_rms_contract(module: str, cls: str) -> RmsContract | None:
    """The contract of the upstream transformers class ``module.cls`` (read from source, never imported)."""
    init = upstream_class_method(module, cls, "__init__")
    forward = upstream_class_method(module, cls, "forward")
    if init is None and forward is None:
        return None
    return class_rms_contract(init, forward)


# -- what a kernel function of the tree computes ----------------------------------------------------------


@dataclass(frozen=True)
class KernelFunction:
    """An RMSNorm kernel function of the tree (``veomni.ops.kernels.rms_norm.npu.<name>``), read from its source.

    ``method_style``: written as a forward replacement (``def f(self, x)``: it reads the module's attributes,
    ``module_attrs``); otherwise functional (``def f(x, weight, eps)``). ``contract``: "offset" when it adds 1 to
    the weight it is given, "standard" when it uses the weight raw, "unweighted" when it takes none."""

    name: str
    contract: str | None
    method_style: bool
    module_attrs: frozenset[str] = frozenset()
    rms: bool = True  # an RMSNorm kernel: it calls one (`npu_rms_norm`), or its module is an rms_norm one

    @property
    def eps_attrs(self) -> tuple[str, ...]:
        return tuple(a for a in _EPS_NAMES if a in self.module_attrs)


_NAME_WORDS = (("qwen3_5", OFFSET), ("gemma", OFFSET), ("offset", OFFSET), ("zero_centered", OFFSET))


def function_kernel(
    func: ast.FunctionDef, module: ast.Module | None = None, flags: dict[str, object] | None = None
) -> KernelFunction:
    """A function read as an RMSNorm kernel: what it does with the weight it is given (or the module's).

    ``module``: the module defining it, whose functions it may hand the weight to (``_centered(gamma)`` returning
    ``1.0 + w``). ``flags``: the keyword values a binding fixes (``functools.partial(kernel, zero_centered=True)``;
    ``{}`` for the function bound as it is, its defaults): a ``1 + weight`` under a branch on a parameter is then
    judged by the branch that runs. None (nothing known of the binding) counts any offset."""
    return _function_contract(func, module, flags)


def _params(func: ast.FunctionDef | ast.Lambda) -> list[str]:
    return [a.arg for a in (*func.args.posonlyargs, *func.args.args)]


def _param_values(func: ast.FunctionDef, flags: dict[str, object]) -> dict[str, object]:
    """Each parameter's value under a binding: the bound keyword, else its literal default."""
    args = func.args
    positional = [*args.posonlyargs, *args.args]
    values: dict[str, object] = {}
    for arg, default in zip(positional[len(positional) - len(args.defaults) :], args.defaults):
        if isinstance(default, ast.Constant):
            values[arg.arg] = default.value
    for arg, default in zip(args.kwonlyargs, args.kw_defaults):
        if isinstance(default, ast.Constant):
            values[arg.arg] = default.value
    for key, value in flags.items():  # an int key: a positional argument of a call (``call_flags``)
        if isinstance(key, int):
            if key < len(positional):
                values[positional[key].arg] = value
        else:
            values[key] = value
    return values


def call_flags(call: ast.Call) -> dict[object, object]:
    """The binding a direct call gives a kernel function, as ``function_kernel``'s ``flags``: its literal
    arguments (keywords by name, positional ones by index); any other argument is unknown."""
    out: dict[object, object] = {}
    for index, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            break
        out[index] = arg.value if isinstance(arg, ast.Constant) else _UNKNOWN
    for keyword in call.keywords:
        if keyword.arg is not None:
            out[keyword.arg] = keyword.value.value if isinstance(keyword.value, ast.Constant) else _UNKNOWN
    return out


_UNKNOWN = object()


def _truth(test: ast.AST, values: dict[str, object]) -> object:
    """The truth of a branch test on the function's parameters (``zero_centered``, ``not offset``, ``a and b``),
    or ``_UNKNOWN``."""
    if isinstance(test, ast.Name):
        value = values.get(test.id, _UNKNOWN)
        return _UNKNOWN if value is _UNKNOWN else bool(value)
    if isinstance(test, ast.Constant):
        return bool(test.value)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = _truth(test.operand, values)
        return _UNKNOWN if inner is _UNKNOWN else not inner
    if isinstance(test, ast.BoolOp):
        parts = [_truth(v, values) for v in test.values]
        want = isinstance(test.op, ast.Or)
        if want in parts:
            return want
        return _UNKNOWN if _UNKNOWN in parts else not want
    return _UNKNOWN


def _live_nodes(func: ast.FunctionDef, flags: dict[str, object] | None) -> list[ast.AST]:
    """The nodes of ``func`` (``ast.walk`` order is not kept) that run under ``flags``: a branch on a parameter
    whose value the binding fixes keeps only the side taken."""
    if flags is None:
        return _walk(func)
    values = _param_values(func, flags)
    out: list[ast.AST] = []
    stack: list[ast.AST] = [func]
    while stack:
        node = stack.pop()
        out.append(node)
        if isinstance(node, (ast.If, ast.IfExp)):
            truth = _truth(node.test, values)
            if truth is not _UNKNOWN:
                stack.append(node.test)
                taken = node.body if truth else node.orelse
                stack.extend(taken if isinstance(taken, list) else [taken])
                continue
        stack.extend(ast.iter_child_nodes(node))
    return out


def _helper_offsets(module: ast.Module | None) -> dict[str, set[int]]:
    """Module-level functions that add 1 to one of their parameters and return it (``def _centered(w): return
    1.0 + w.float()``): name -> the positions of those parameters."""
    out: dict[str, set[int]] = {}
    for stmt in module.body if module is not None else ():
        if (  # `_centered = lambda w: 1.0 + w.float()`
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, ast.Lambda)
        ):
            params = _params(stmt.value)
            operand = _plus_one(_strip_casts(stmt.value.body))
            operand = _strip_casts(operand) if operand is not None else None
            if isinstance(operand, ast.Name) and operand.id in params:
                out.setdefault(stmt.targets[0].id, set()).add(params.index(operand.id))
            continue
        if not isinstance(stmt, ast.FunctionDef):
            continue
        params = _params(stmt)
        for node in _walk(stmt):
            if isinstance(node, ast.Return) and node.value is not None:
                operand = _plus_one(_strip_casts(node.value))
                operand = _strip_casts(operand) if operand is not None else None
                if isinstance(operand, ast.Name) and operand.id in params:
                    out.setdefault(stmt.name, set()).add(params.index(operand.id))
    return out


def _number(node: ast.AST, values: dict[str, object], any_branch: bool) -> object:
    """The number ``node`` is under ``values`` (a literal, a parameter's bound value, ``1.0 if flag else 0.0``),
    else ``_UNKNOWN``; ``any_branch``: an undecided ``IfExp`` counts as 1 when one side is."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.Name):
        value = values.get(node.id, _UNKNOWN)
        return value if type(value) in (int, float) else _UNKNOWN
    if isinstance(node, ast.IfExp):
        truth = _truth(node.test, values)
        if truth is not _UNKNOWN:
            return _number(node.body if truth else node.orelse, values, any_branch)
        sides = [_number(node.body, values, any_branch), _number(node.orelse, values, any_branch)]
        return 1 if any_branch and 1 in sides else _UNKNOWN
    return _UNKNOWN


def _function_contract(
    func: ast.FunctionDef,
    module: ast.Module | None = None,
    flags: dict[str, object] | None = None,
    depth: int = 0,
) -> KernelFunction:
    params = _params(func)
    first = params[0] if params else ""
    module_attrs = frozenset(
        n.attr
        for n in _walk(func)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == first
    )
    method_style = "weight" in module_attrs
    weight_param = next((p for p in params if "weight" in p), None)
    if weight_param is None:
        # a raw backward `(grad_output, saved)` unpacks the weight from what the forward saved
        weight_param = next(
            (
                e.id
                for n in _walk(func)
                if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Tuple)
                for e in n.targets[0].elts
                if isinstance(e, ast.Name) and "weight" in e.id
            ),
            None,
        )
    if weight_param is None and len(params) > 1 and not _is_backward(func, params):
        weight_param = params[1]
    nodes = _live_nodes(func, flags)
    # locals bound to the weight as it is, or cast (`g = gamma.float()`): an offset added to one is the weight's
    aliases: set[str] = set()
    for node in nodes:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and _is_weight_ref(_strip_casts(node.value), method_style, first, weight_param, aliases)
        ):
            aliases.add(node.targets[0].id)

    def is_weight(node: ast.AST) -> bool:
        return _is_weight_ref(_strip_casts(node), method_style, first, weight_param, aliases)

    helpers = _helper_offsets(module) if module is not None else {}
    # numbers the body adds: parameters bound or defaulted, locals fixed to one (`offset = 1.0 if zc else 0.0`)
    values = _param_values(func, flags or {})
    for node in nodes:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            number = _number(node.value, values, flags is None)
            if number is not _UNKNOWN:
                values[node.targets[0].id] = number

    def is_one(node: ast.AST) -> bool:
        return _number(node, values, flags is None) == 1

    module_funcs = {
        s.name: s for s in (module.body if module is not None else ()) if isinstance(s, ast.FunctionDef)
    }
    offset = used = rejects = False
    guards = (
        {  # `weight is None` / `weight is not None` tests and `del weight`: no use of the weight's values
            id(n.left)
            for n in nodes
            if isinstance(n, ast.Compare) and len(n.ops) == 1 and _is_none(n.comparators[0])
        }
        | {id(t) for n in nodes if isinstance(n, ast.Delete) for t in n.targets}
    )
    for node in nodes:
        if _rejects_weight(node, is_weight):
            rejects = True  # `if weight is not None: raise ...`, `assert weight is None`
        if isinstance(node, ast.Delete) and any(is_weight(t) for t in node.targets):
            rejects = True  # `del weight`: the weight it is handed is dropped
    for node in nodes:
        if _liger_offset(
            node
        ):  # Liger's functional RMSNorm adds its literal `offset` (1) to the weight itself
            offset = True
        operand = _plus_one(node)
        if operand is not None and is_weight(operand):
            offset = True
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            if (is_one(node.right) and is_weight(node.left)) or (is_one(node.left) and is_weight(node.right)):
                offset = True  # `weight + offset`, the offset a parameter bound to 1
        if depth < 2 and isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            callee = module_funcs.get(node.func.id)
            if (
                callee is not None
                and callee is not func
                and _passes_weight_to_offset(node, callee, module, is_weight, depth)
            ):
                offset = True  # `_rms_norm_npu(x, weight, eps, offset=1.0)`, a module helper adding it
        if (
            isinstance(node, ast.AugAssign)
            and isinstance(node.op, ast.Add)
            and is_one(node.value)
            and isinstance(node.target, ast.Name)
            and node.target.id in aliases
        ):
            offset = True  # `g = gamma.float(); g += 1.0`
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in helpers:
            if any(i < len(node.args) and is_weight(node.args[i]) for i in helpers[node.func.id]):
                offset = True  # `_centered(gamma)`, a helper of the module returning `1.0 + w`
        if is_weight(node) and not isinstance(node, ast.Call) and id(node) not in guards:
            used = True
    if offset:
        contract: str | None = OFFSET
    elif rejects and not used and not method_style:
        contract = UNWEIGHTED  # `if weight is not None: raise ...`
    elif used:
        contract = STANDARD
    else:
        contract = None
    calls_rms = any(
        isinstance(n, ast.Call) and "rmsnorm" in (last_name(n.func) or "").replace("_", "").lower()
        for n in _walk(func)
    )
    return KernelFunction(
        func.name, contract, method_style, module_attrs if method_style else frozenset(), calls_rms
    )


def _passes_weight_to_offset(
    call: ast.Call,
    callee: ast.FunctionDef,
    module: ast.Module | None,
    is_weight,
    depth: int,  # noqa: ANN001
) -> bool:
    """A call handing the weight to a module function that adds 1 to it under the arguments the call gives."""
    params = _params(callee)
    weight = next((p for p in params if "weight" in p), params[1] if len(params) > 1 else None)
    if weight is None:
        return False
    index = params.index(weight)
    given = (
        call.args[index]
        if index < len(call.args)
        else next((k.value for k in call.keywords if k.arg == weight), None)
    )
    if given is None or isinstance(given, ast.Starred) or not is_weight(given):
        return False
    bound: dict[str, object] = {
        params[i]: a.value for i, a in enumerate(call.args[: len(params)]) if isinstance(a, ast.Constant)
    }
    bound.update({k.arg: k.value.value for k in call.keywords if k.arg and isinstance(k.value, ast.Constant)})
    return _function_contract(callee, module, bound, depth + 1).contract == OFFSET


def _is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _is_backward(func: ast.FunctionDef, params: list[str]) -> bool:
    """A raw backward (``def backward(grad_output, saved)``): its second parameter is no weight."""
    return "backward" in func.name.lower() or (bool(params) and params[0].startswith(("grad", "dy", "d_out")))


def _rejects_weight(node: ast.AST, is_weight) -> bool:  # noqa: ANN001
    """``if weight is not None: raise ...`` or ``assert weight is None``: a kernel refusing any weight."""
    test = node.test if isinstance(node, (ast.If, ast.Assert)) else None
    if not (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and _is_none(test.comparators[0])
        and is_weight(test.left)
    ):
        return False
    if isinstance(node, ast.Assert):
        return isinstance(test.ops[0], ast.Is)
    return isinstance(test.ops[0], ast.IsNot) and any(isinstance(n, ast.Raise) for n in node.body)


def _is_weight_ref(
    node: ast.AST, method_style: bool, first: str, weight_param: str | None, aliases: set[str]
) -> bool:
    if method_style:
        return _named_attr(node, first, "weight") or (isinstance(node, ast.Name) and node.id in aliases)
    return isinstance(node, ast.Name) and (node.id == weight_param or node.id in aliases)


def _liger_offset(node: ast.AST) -> bool:
    """`LigerRMSNormFunction.apply(x, w, eps, 1.0, ...)`, `liger_rms_norm(x, w, eps, offset=1)`: a Liger RMSNorm
    call given a literal offset of 1."""
    if not isinstance(node, ast.Call):
        return False
    text = ast.unparse(node.func).lower()
    if "liger" not in text or "rms" not in text:
        return False
    value = next((k.value for k in node.keywords if k.arg == "offset"), None)
    if value is None and len(node.args) > 3 and not any(isinstance(a, ast.Starred) for a in node.args[:4]):
        value = node.args[3]
    return isinstance(value, ast.Constant) and type(value.value) in (int, float) and value.value == 1


def _named_attr(node: ast.AST, receiver: str, attr: str) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == attr
        and isinstance(node.value, ast.Name)
        and node.value.id == receiver
    )


@functools.lru_cache(maxsize=64)
def _kernel_functions_at(path: str, state: tuple[int, int, int]) -> dict[str, KernelFunction]:
    tree = _tree_of(path)
    if tree is None:
        return {}
    return {s.name: _function_contract(s, tree) for s in tree.body if isinstance(s, ast.FunctionDef)}


def kernel_function(
    dotted: str, anchor: str | None, flags: dict[str, object] | None = None
) -> KernelFunction | None:
    """The RMSNorm kernel function ``dotted`` (``veomni.ops.kernels.rms_norm.npu.qwen3_5_rms_norm_forward_npu``)
    as the tree holding ``anchor`` defines it: read from the kernel module's source (never imported). Without
    the tree's source, its contract is read from the words of its name (``qwen3_5_``/``gemma``: offset).
    ``flags``: the keywords a binding fixes (see ``function_kernel``)."""
    module, _, name = dotted.rpartition(".")
    if not module.startswith("veomni.ops.kernels"):
        return None
    if anchor is not None:
        from npu_lint.veomni.patchgen import path_of_module

        path = path_of_module(module, anchor)
        if path is not None:
            try:
                st = os.stat(path)
            except OSError:
                st = None
            if st is not None:
                found = _kernel_functions_at(path, (st.st_size, st.st_mtime_ns, st.st_ino)).get(name)
                if found is not None and flags is not None:
                    tree = _tree_of(path)
                    func = next(
                        (
                            f
                            for f in getattr(tree, "body", ())
                            if isinstance(f, ast.FunctionDef) and f.name == name
                        ),
                        None,
                    )
                    if func is not None:
                        found = dataclasses.replace(
                            found, contract=_function_contract(func, tree, flags).contract
                        )
                if found is not None:
                    if not found.rms and "rms_norm" in module:
                        return dataclasses.replace(found, rms=True)
                    return found
    lowered = dotted.lower()  # the module path names the variant too (`rms_norm.qwen3_5.npu.forward`)
    if "rms" not in lowered:
        return None
    if "unweighted" in lowered:
        return KernelFunction(name, UNWEIGHTED, False)
    contract = next((c for word, c in _NAME_WORDS if word in lowered), None)
    return KernelFunction(name, contract, False) if contract is not None else None


def class_contract_of(dotted: str, anchor: str | None) -> RmsContract | None:
    """The contract of the RMSNorm class ``dotted``: a transformers class (its installed source), or a class of
    the tree holding ``anchor`` (``veomni.models...``); None when it cannot be read."""
    module, _, name = dotted.rpartition(".")
    if module.startswith("transformers."):
        return upstream_rms_contract(module, name)
    if not module.startswith("veomni.") or anchor is None:
        return None
    from npu_lint.veomni.patchgen import path_of_module

    path = path_of_module(module, anchor)
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    node = _classes_at(path, (st.st_size, st.st_mtime_ns, st.st_ino)).get(name)
    if node is None:
        return None
    methods = {f.name: f for f in node.body if isinstance(f, ast.FunctionDef)}
    return class_rms_contract(methods.get("__init__"), methods.get("forward"))


@functools.lru_cache(maxsize=32)
def _classes_at(path: str, state: tuple[int, int, int]) -> dict[str, ast.ClassDef]:
    tree = _tree_of(path)
    if tree is None:
        return {}
    return {s.name: s for s in tree.body if isinstance(s, ast.ClassDef)}


def _tree_of(path: str) -> ast.Module | None:
    """The run's one tree of a module of the tree (patchgen's shared file store: parsed once per process, and
    not again when the file pass lints it)."""
    from npu_lint.veomni.patchgen import load_file

    parsed = load_file(path)
    return parsed.tree if parsed is not None else None


# -- does a weight's initialisation match what the norm does with it? --------------------------------------


def _receiver_fill(node: ast.AST, receivers: set[str]) -> tuple[str, str] | None:
    """`init.ones_(m.weight)`, `nn.init.constant_(m.weight, 0.0)`, `m.weight.data.fill_(1)`, `m.weight.zero_()`
    with ``m`` one of ``receivers`` -> (receiver, "zeros" | "ones"); else None."""
    if not isinstance(node, ast.Call):
        return None
    name = last_name(node.func)
    target: ast.AST | None = None
    kind: str | None = None
    if name in ("zeros_", "ones_", "constant_") and node.args:
        target = node.args[0]
        if name == "constant_":
            kind = _fill_kind(node.args[1]) if len(node.args) > 1 else None
        else:
            kind = "zeros" if name == "zeros_" else "ones"
    elif name in ("zero_", "fill_") and isinstance(node.func, ast.Attribute):
        target = node.func.value
        kind = "zeros" if name == "zero_" else (_fill_kind(node.args[0]) if node.args else None)
    if target is None or kind is None:
        return None
    if isinstance(target, ast.Attribute) and target.attr == "data":
        target = target.value
    if (
        isinstance(target, ast.Attribute)
        and target.attr == "weight"
        and isinstance(target.value, ast.Name)
        and target.value.id in receivers
    ):
        return target.value.id, kind
    return None


def expected_weight_init(
    cls: ast.ClassDef | None, name: str, upstream_module: str | None, use_forward: bool = True
) -> str | None:
    """What a norm class's weight must start at for what it computes: "zeros" when its forward multiplies by
    `1 + weight` (the offset form; not asked with ``use_forward=False``), else what the upstream class of the
    same name starts at (read from the installed transformers source); None when neither says."""
    if cls is not None and use_forward:
        methods = {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)}
        if methods.get("forward") is not None and class_rms_contract(None, methods["forward"]).offset is True:
            return "zeros"
    if upstream_module:
        up = upstream_rms_contract(upstream_module, name)
        if up is not None and up.weight_init in ("zeros", "ones"):
            if up.offset is True and up.weight_init == "zeros" or up.offset is False:
                return up.weight_init
    return None


def weight_init_faults(
    tree: ast.Module, upstream_module: str | None, init_patches: dict[str, ast.FunctionDef] | None = None
) -> list[tuple[ast.AST, str, str, str]]:
    """RMSNorm weights a module initialises against what its norm computes: a class whose ``__init__`` creates
    the weight at ones while it applies `1 + weight` (or its upstream class starts at zeros), or the reverse; and a
    model's ``_init_weights`` that fills an RMSNorm class's weight (`init.ones_(module.weight)` under
    `isinstance(module, XRMSNorm)`) with the other value. A spec's class replacement (`replace_class("X")`) and
    ``__init__`` patches (``init_patches``: class -> patch function) are read as the class they patch. Returns
    (node, class, found, expected)."""
    classes: dict[str, ast.ClassDef] = {}
    for s in tree.body:
        if isinstance(s, ast.ClassDef):
            classes[s.name] = s
            for deco in s.decorator_list:
                if isinstance(deco, ast.Call) and last_name(deco.func) == "replace_class" and deco.args:
                    target = deco.args[0]
                    if isinstance(target, ast.Constant) and isinstance(target.value, str):
                        classes.setdefault(target.value, s)
    inits: dict[str, ast.FunctionDef] = {}
    for name, cls in classes.items():
        init = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
        if init is not None:
            inits[name] = init
    for name, patch in (init_patches or {}).items():
        inits.setdefault(name, patch)
    out: list[tuple[ast.AST, str, str, str]] = []
    seen: set[int] = set()
    for name in sorted(n for n in inits if n.endswith("RMSNorm")):
        cls = classes.get(name)
        init = inits[name]
        if id(init) in seen:
            continue
        seen.add(id(init))
        found = param_init_kind(init, "weight")
        # the class's own forward is judged against its init by the call checks (NPU404 eager products): here
        # only the upstream class says what the weight starts at
        expected = expected_weight_init(cls, name, upstream_module, use_forward=False)
        if found in ("zeros", "ones") and expected is not None and found != expected:
            node = next(
                (
                    n.value
                    for n in _walk(init)
                    if isinstance(n, ast.Assign) and any(_self_target(t, "weight") for t in n.targets)
                ),
                init,
            )
            out.append((node, name, found, expected))
    for func in nodes_of(tree, ast.FunctionDef):  # the file's shared type index, not a walk of its own
        if "init" not in func.name:
            continue
        for branch in _walk(func):
            if not isinstance(branch, ast.If):
                continue
            test = branch.test
            if not (
                isinstance(test, ast.Call) and last_name(test.func) == "isinstance" and len(test.args) == 2
            ):
                continue
            receiver = test.args[0]
            kinds = test.args[1].elts if isinstance(test.args[1], ast.Tuple) else [test.args[1]]
            names = {last_name(k) for k in kinds}
            rms = [n for n in names if n and n.endswith("RMSNorm")]
            if len(rms) != len(names) or not isinstance(receiver, ast.Name):
                continue
            expected_kinds = {expected_weight_init(classes.get(n), n, upstream_module) for n in rms}
            if len(expected_kinds) != 1 or None in expected_kinds:
                continue
            expected = expected_kinds.pop()
            for stmt in branch.body:
                for n in _walk(stmt):
                    fill = _receiver_fill(n, {receiver.id})
                    if fill is not None and fill[1] != expected:
                        out.append((n, rms[0], fill[1], expected))
    return out


def init_weights_fills(tree: ast.Module, cls_name: str) -> set[str]:
    """What the file's weight initialisers (``_init_weights``) fill ``cls_name``'s weight with
    (`init.zeros_(module.weight)` under `isinstance(module, Cls)`): "zeros" / "ones"."""
    out: set[str] = set()
    for func in nodes_of(tree, ast.FunctionDef):
        if "init" not in func.name or func.name == "__init__":
            continue
        for branch in _walk(func):
            test = branch.test if isinstance(branch, ast.If) else None
            if not (
                isinstance(test, ast.Call)
                and last_name(test.func) == "isinstance"
                and len(test.args) == 2
                and isinstance(test.args[0], ast.Name)
            ):
                continue
            kinds = test.args[1].elts if isinstance(test.args[1], ast.Tuple) else [test.args[1]]
            if cls_name not in {last_name(k) for k in kinds}:
                continue
            for stmt in branch.body:
                for n in _walk(stmt):
                    fill = _receiver_fill(n, {test.args[0].id})
                    if fill is not None:
                        out.add(fill[1])
    return out


def unread_weights(tree: ast.Module) -> list[tuple[ast.AST, str]]:
    """RMSNorm classes of a module whose ``__init__`` creates a weight parameter (`self.weight =
    nn.Parameter(...)`) that their ``forward`` never reads (nor hands the whole module to a call, nor calls a
    helper method of the class that reads it): the learned scale is dropped. Returns (where the weight belongs in
    the forward, class)."""
    out: list[tuple[ast.AST, str]] = []
    for cls in tree.body:
        if not (isinstance(cls, ast.ClassDef) and "rmsnorm" in cls.name.lower()):
            continue
        methods = {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)}
        init, forward = methods.get("__init__"), methods.get("forward")
        if init is None or forward is None or param_init_kind(init, "weight") is None:
            continue
        reached = [forward]
        for n in _walk(forward):  # `self._norm(x)`: helper methods of the class are read with it
            if (
                isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and _self_target(n.func) in methods
            ):
                reached.append(methods[n.func.attr])
        reads = False
        for func in reached:
            for n in _walk(func):
                if _self_target(n, "weight") is not None:
                    reads = True
                elif isinstance(n, ast.Call) and any(
                    isinstance(a, ast.Name) and a.id == "self" for a in n.args
                ):
                    reads = True  # the module itself handed to a kernel or a helper
                elif isinstance(n, ast.Call) and last_name(n.func) in ("super", "getattr", "forward"):
                    reads = True
        if not reads:
            out.append((_weight_site(forward), cls.name))
    return out


def _weight_site(forward: ast.FunctionDef) -> ast.AST:
    """Where the weight belongs in a norm forward: the statement after the normalisation (`x * rsqrt(...)`),
    else the return, else the function."""
    body = forward.body
    for i, stmt in enumerate(body):
        if any(last_name(n.func) in ("rsqrt", "sqrt") for n in _walk(stmt) if isinstance(n, ast.Call)):
            return body[i + 1] if i + 1 < len(body) else stmt
    return next((s for s in body if isinstance(s, ast.Return)), forward)


# ---------------------------------------------------------------------------------------------------------------
# Query/key siblings: attention normalises queries and keys with their own norms (``q_norm`` / ``k_norm``, their
# weights, their saved reciprocal RMS); the query statement is the reference for the key statement beside it.

_ROLE = {"q": "q", "query": "q", "k": "k", "key": "k"}
_SWAP = {"q": "k", "k": "q", "query": "key", "key": "query"}
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _role_parts(ident: str) -> list[str]:
    return ident.lower().split("_")


def _roles(ident: str) -> set[str]:
    return {_ROLE[p] for p in _role_parts(ident) if p in _ROLE}


def _swapped(ident: str) -> str:
    return "_".join(_SWAP.get(p, p) if p.lower() in _SWAP else p for p in ident.split("_"))


def _norm_statement(stmt: ast.stmt) -> bool:
    for node in nodes_of(stmt, ast.Call):
        name = call_name(node)
        if "norm" in name.lower():
            return True
    return False


# a leftover that matters names the norm or its state (``q_norm``, ``invvar_q``, ``norm_q_weight``, ``rstd_k``);
# ``q_len`` or ``q.dtype`` beside the key statement are shared reads, not the query side's norm
_NORMISH = re.compile(r"norm|invvar|rstd|weight|variance|eps", re.I)


def _norm_operands(stmt: ast.stmt) -> set[str]:
    """Names handed directly to a norm call of ``stmt`` (``npu_rms_norm_backward(dy, k, w, invvar)`` -> ``dy``,
    ``k``, ...): the tensor a norm normalises, or whose backward it recomputes, is the norm's own input, so a
    leftover there (the query backward fed the keys) matters like a leftover weight; ``q.dtype`` or ``q_len``
    read inside another expression does not count."""
    out: set[str] = set()
    for node in nodes_of(stmt, ast.Call):
        assert isinstance(node, ast.Call)
        if "norm" in call_name(node).lower():
            for arg in (*node.args, *(kw.value for kw in node.keywords)):
                if isinstance(arg, ast.Name):
                    out.add(arg.id)
    return out


def query_key_leftovers(func: ast.AST) -> list[tuple[ast.stmt, str, str, bool]]:
    """``(statement, leftover, expected)`` for a statement on the key (or query) side of a norm computation that
    is its query (key) sibling statement with every q/k name swapped except one: ``key_states =
    self.q_norm(key_states)`` beside ``query_states = self.q_norm(query_states)``, a key backward handed
    ``invvar_q``. Statements are compared by their identifiers in order (constants may differ). The last item
    says the leftover is the tensor handed to the norm (`npu_rms_norm_backward(dy, k, norm_q_weight, ...)`)
    rather than the norm's weight or saved state."""
    stmts = [s for s in nodes_of(func, ast.Assign, ast.AugAssign, ast.Expr, ast.Return) if _norm_statement(s)]
    if len(stmts) < 2:
        return []
    idents = {id(s): _IDENT.findall(ast.unparse(s)) for s in stmts}
    out: list[tuple[ast.stmt, str, str, bool]] = []
    for s in stmts:
        mine = idents[id(s)]
        counts = {"q": 0, "k": 0}
        for ident in mine:
            for role in _roles(ident):
                counts[role] += 1
        if not counts["q"] or not counts["k"] or counts["q"] == counts["k"]:
            continue
        side, other = ("k", "q") if counts["k"] > counts["q"] else ("q", "k")
        for t in stmts:
            if t is s:
                continue
            theirs = idents[id(t)]
            if len(theirs) != len(mine) or any(side in _roles(i) for i in theirs):
                continue
            mapped = [_swapped(i) for i in theirs]
            diff = [(a, b) for a, b in zip(mine, mapped, strict=True) if a != b]
            operands = _norm_operands(s)
            if diff and all(
                other in _roles(a) and b == _swapped(a) and (_NORMISH.search(a) or a in operands)
                for a, b in diff
            ):
                out.append((s, diff[0][0], diff[0][1], not any(_NORMISH.search(a) for a, _b in diff)))
                break
    return out


# ---------------------------------------------------------------------------------------------------------------
# AdaLN modulation: a normalised input modulated as ``x * (1 + scale) + shift`` (zero-centred scales from a
# scale-shift table); the module's other modulations are the reference for the form one of them uses.

_SCALE = re.compile(r"(?:^|_)scale(?:_|$)|^scale|scale$", re.I)
_SHIFT = re.compile(r"(?:^|_)shift(?:_|$)|^shift|shift$", re.I)


def _leaf(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):
        return _leaf(node.value)
    return ""


def _modulation(node: ast.AST) -> tuple[bool, ast.AST] | None:
    """``(offset, scale term)`` for ``x * S + T`` with S a scale (``scale``, ``1 + scale``) and T a shift."""
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)):
        return None
    prod, shift = node.left, node.right
    if not (isinstance(prod, ast.BinOp) and isinstance(prod.op, ast.Mult)) or not _SHIFT.search(_leaf(shift)):
        return None
    for s in (prod.right, prod.left):
        if (
            isinstance(s, ast.BinOp)
            and isinstance(s.op, ast.Add)
            and isinstance(s.left, ast.Constant)
            and s.left.value == 1
            and _SCALE.search(_leaf(s.right))
        ):
            return True, s
        if _SCALE.search(_leaf(s)):
            return False, s
    return None


def modulation_offset_faults(tree: ast.AST) -> list[tuple[ast.AST, str]]:
    """``(scale, example)`` for a modulation ``x * scale + shift`` in a module whose other modulations all
    read ``x * (1 + scale) + shift``: the zero-centred scale lost its ``1 +``. The reference is the same
    top-level class or function (a pipeline's ``latents * self.scale_factor + self.shift_factor`` is no
    sibling of a transformer block's modulations)."""
    out: list[tuple[ast.AST, str]] = []
    for owner in getattr(tree, "body", ()):
        if not isinstance(owner, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        found = [(m, node) for node in nodes_of(owner, ast.BinOp) if (m := _modulation(node)) is not None]
        offset = [node for (is_offset, _s), node in found if is_offset]
        if not offset or len(offset) < len(found) - len(offset):
            continue
        example = ast.unparse(offset[0])
        out.extend((s, example) for (is_offset, s), _node in found if not is_offset)
    return out


# ---------------------------------------------------------------------------------------------------------------
# Named axes: ``B, T, D, L = x.shape`` names the axes of ``x``; a root-mean-square statistic of ``x`` is taken
# over its hidden axis (D), never over the batch, the tokens or the stacked layers.

_HIDDEN_AXES = frozenset(
    {"d", "h", "c", "e", "hidden", "hidden_size", "dim", "d_model", "embed_dim", "channels"}
)
_OTHER_AXES = frozenset(
    {
        "b",
        "bs",
        "bsz",
        "batch",
        "batch_size",
        "t",
        "s",
        "seq",
        "seq_len",
        "seqlen",
        "n",
        "l",
        "layers",
        "num_layers",
    }
)
_REDUCERS = frozenset({"mean", "sum"})


def _squares(node: ast.AST, name: str) -> bool:
    """Whether ``node`` is ``name`` squared (``x ** 2``, ``x.pow(2)``, ``x.square()``, ``x * x``), casts aside."""

    def is_x(n: ast.AST) -> bool:
        while (
            isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("float", "to")
        ):
            n = n.func.value
        return isinstance(n, ast.Name) and n.id == name

    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Pow) and isinstance(node.right, ast.Constant) and node.right.value == 2:
            return is_x(node.left)
        if isinstance(node.op, ast.Mult):
            return is_x(node.left) and is_x(node.right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr == "square" and not node.args:
            return is_x(node.func.value)
        if node.func.attr == "pow" and len(node.args) == 1 and isinstance(node.args[0], ast.Constant):
            return node.args[0].value == 2 and is_x(node.func.value)
    return False


def named_axis_faults(func: ast.AST) -> list[tuple[ast.Call, str, str]]:
    """``(reduction, axis, hidden)`` for a mean (or sum) of a tensor's squares taken over an axis its shape
    unpack names as the batch, the tokens or the layers (``B, T, D, L = x.shape`` then
    ``torch.mean(x ** 2, dim=-1)``), in a function that takes a root of it (an RMS statistic)."""
    if not any(
        isinstance(n, ast.Call) and call_name(n) in ("rsqrt", "sqrt") for n in nodes_of(func, ast.Call)
    ):
        return []
    axes: dict[str, list[str]] = {}
    unpacked_at: dict[str, int] = {}
    rebound: dict[
        str, list[int]
    ] = {}  # name -> lines where it is bound again (a permute or reshape: other axes)
    for node in nodes_of(func, ast.Assign):
        value, targets = node.value, node.targets  # type: ignore[attr-defined]
        if (
            len(targets) == 1
            and isinstance(targets[0], ast.Tuple)
            and all(isinstance(e, ast.Name) for e in targets[0].elts)
            and isinstance(value, ast.Attribute)
            and value.attr == "shape"
            and isinstance(value.value, ast.Name)
        ):
            axes[value.value.id] = [e.id for e in targets[0].elts]  # type: ignore[attr-defined]
            unpacked_at[value.value.id] = node.lineno
            continue
        for target in targets:
            if isinstance(target, ast.Name):
                rebound.setdefault(target.id, []).append(node.lineno)
    if not axes:
        return []
    out: list[tuple[ast.Call, str, str]] = []
    for call in nodes_of(func, ast.Call):
        func_ = call.func  # type: ignore[attr-defined]
        if not isinstance(func_, ast.Attribute) or func_.attr not in _REDUCERS:
            continue
        functional = isinstance(func_.value, ast.Name) and func_.value.id == "torch"
        operand = call.args[0] if functional and call.args else None if functional else func_.value  # type: ignore[attr-defined]
        dim_node = next((k.value for k in call.keywords if k.arg in ("dim", "axis")), None)  # type: ignore[attr-defined]
        if dim_node is None:
            rest = call.args[1:] if functional else call.args  # type: ignore[attr-defined]
            dim_node = rest[0] if rest else None
        if operand is None or dim_node is None:
            continue
        dim = int_value(dim_node)
        if dim is None:
            continue
        for name, names in axes.items():
            if not _squares(operand, name) or not -len(names) <= dim < len(names):
                continue
            if any(unpacked_at[name] < line <= call.lineno for line in rebound.get(name, ())):
                continue  # the tensor was rebound after the unpack: its axes may no longer be the named ones
            axis = names[dim]
            hidden = [n for n in names if n.lower() in _HIDDEN_AXES]
            if axis.lower() in _OTHER_AXES and hidden:
                out.append((call, axis, hidden[0]))  # type: ignore[arg-type]
    return out
