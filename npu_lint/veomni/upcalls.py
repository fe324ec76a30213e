"""The call contract between a patch and the upstream transformers module it patches.

A spec's replacement functions and a generated file's patched methods call into the installed transformers source:
methods of the patched class (`self.compute_3d_position_ids(...)`), submodules built by the upstream `__init__`
(`self.rotary_pos_emb(pos_ids)` runs the rotary class's `forward`), unbound methods handed another object as `self`
(`Qwen3VLModel.get_rope_index(fake, ...)`), and unbound methods wrapped by a picklable helper
(`partial(get_position_id, Qwen3VLModel.get_rope_index, fake)`, the helper calling `main_func(self, **kwargs)`).
When transformers moves (5.9 made `mm_token_type_ids` a required parameter of `get_rope_index`, made
`get_rope_index` call `self.get_vision_position_ids`, and made the vision rotary module take position ids instead
of a length) such calls break while the patch still reads fine.

This module resolves those calls statically (the upstream source is read by :mod:`npu_lint.veomni.upstream`, never
imported) and states, per call, what the callee needs: its parameters (required ones, whether it takes `**kwargs`),
the attributes it reads on `self`, and the parameters its body uses as tensors. The rules compare the call with it.
The data pipeline's side of the position-id contract (which keywords every `position_id_func(...)` caller in the
tree passes) is read from the tree's `veomni/data` package; :func:`is_position_id_function` names the functions
that produce the M-RoPE position ids (the model's `get_rope_index`, the pipeline's `position_id_func`).
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field

from npu_lint.core.astutil import call_name, last_name, nodes_of, scoped_memo, walk
from npu_lint.core.memo import Bounded
from npu_lint.veomni.upstream import (
    _decorator_target,
    file_source_module,
    upstream_class,
    upstream_class_method,
    upstream_mro,
)

__all__ = [
    "ATTENTION_MODULE_ATTRIBUTES",
    "attention_module_gaps",
    "CalleeFacts",
    "UpstreamCall",
    "callee_facts",
    "upstream_calls",
    "pipeline_position_keys",
    "is_position_id_function",
    "writes_positions",
    "scalar_expr",
    "object_attributes",
]

# The position-id producers: the model's `get_rope_index` (and `*_rope_index` variants), the data pipeline's
# `position_id_func` (the model's function handed to the transform), and `get_position_ids`.
_POSITION_ID_PARTS = ("rope_index", "position_id_func")
_POSITION_ID_NAMES = frozenset({"get_position_ids"})


def is_position_id_function(name: str) -> bool:
    """``get_rope_index`` / ``position_id_func`` / ``get_position_ids``: a call of it returns M-RoPE position ids."""
    lowered = name.lower()
    return lowered in _POSITION_ID_NAMES or any(part in lowered for part in _POSITION_ID_PARTS)


def writes_positions(
    func: ast.FunctionDef, local: dict[str, ast.FunctionDef] | None = None, depth: int = 0
) -> bool:
    """Whether ``func`` produces position ids: it names `position_ids` (a key, keyword, local or attribute),
    calls a position / RoPE function, or calls a function of ``local`` (the module's own functions) that does,
    followed two levels deep (`features.update(_index3d(...))`)."""
    for node in walk(func):
        if isinstance(node, ast.Constant) and node.value == "position_ids":
            return True
        if isinstance(node, ast.Name) and ("position" in node.id or "rope" in node.id):
            return True
        if isinstance(node, ast.Attribute) and ("position" in node.attr or "rope" in node.attr):
            return True
        if isinstance(node, ast.keyword) and node.arg == "position_ids":
            return True
    if not local or depth >= 2:
        return False
    for node in walk(func):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            helper = local.get(node.func.id)
            if helper is not None and helper is not func and writes_positions(helper, local, depth + 1):
                return True
    return False


# Attributes and methods of a tensor: a parameter used with one of them is a tensor to the callee.
_TENSOR_ATTRS = frozenset(
    {
        "unsqueeze",
        "squeeze",
        "view",
        "reshape",
        "to",
        "float",
        "long",
        "int",
        "shape",
        "device",
        "dtype",
        "size",
        "flatten",
        "expand",
        "repeat",
        "contiguous",
        "transpose",
        "permute",
        "dim",
        "numel",
        "type_as",
        "cumsum",
        "masked_fill",
        "new_zeros",
        "new_ones",
        "clone",
        "detach",
    }
)
# builtins that return a Python number
_SCALAR_CALLS = frozenset({"max", "min", "len", "int", "sum", "round", "abs"})
# bases the reader cannot follow whose methods a patch never names as `Cls.method` (torch, hub and adapter mixins)
_LEAF_BASES = frozenset({"Module", "object", "ABC", "Generic", "PushToHubMixin", "PeftAdapterMixin"})


@dataclass(frozen=True)
class CalleeFacts:
    """What an upstream function needs from a call."""

    name: str  # "Cls.method"
    positional: tuple[str, ...]  # positional parameters, `self` included for a method
    required: frozenset[str]  # parameters without a default (`self` excluded)
    keywords: frozenset[str]  # every parameter name a keyword can bind
    var_positional: bool
    var_keyword: bool
    self_reads: frozenset[str]  # attributes read on `self` (methods called on it included)
    tensor_params: frozenset[str]  # parameters the body uses with a tensor attribute or method


def callee_facts(func: ast.FunctionDef, name: str) -> CalleeFacts:
    memo = scoped_memo("upcalls.facts")
    hit = memo.get(id(func))
    if hit is not None and hit[0] is func:
        return hit[1]  # type: ignore[no-any-return]
    args = func.args
    positional = tuple(a.arg for a in [*args.posonlyargs, *args.args])
    first_default = len(positional) - len(args.defaults)
    required = {p for i, p in enumerate(positional) if i < first_default and i > 0}
    required |= {a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=False) if d is None}
    keywords = frozenset(a.arg for a in [*args.args, *args.kwonlyargs])
    self_name = positional[0] if positional else None
    params = set(keywords)
    reads: set[str] = set()
    tensors: set[str] = set()
    stored: set[str] = set()
    for node in walk(func):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == self_name:
                if isinstance(node.ctx, ast.Load):
                    reads.add(node.attr)
                else:
                    stored.add(node.attr)
            elif node.value.id in params and node.attr in _TENSOR_ATTRS:
                tensors.add(node.value.id)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id in params:
            params.discard(node.id)  # rebound: its later uses say nothing about the argument
            tensors.discard(node.id)
    facts = CalleeFacts(
        name=name,
        positional=positional,
        required=frozenset(required),
        keywords=keywords,
        var_positional=args.vararg is not None,
        var_keyword=args.kwarg is not None,
        self_reads=frozenset(reads - stored),
        tensor_params=frozenset(tensors),
    )
    memo[id(func)] = (func, facts)
    return facts


@dataclass
class UpstreamCall:
    """One call from a patch into upstream code."""

    node: (
        ast.Call
    )  # the call in the linted file (for a wrapped method: the `main_func(...)` call in the wrapper)
    facts: CalleeFacts
    bound: bool  # the callee's first parameter is bound (`self.m(...)`, a submodule's forward)
    self_obj: ast.expr | None = None  # the object handed as `self` to an unbound method
    scope: ast.FunctionDef | None = None  # the function the object is built in
    supplied: set[str] = field(default_factory=set)  # keywords a wrapper adds to its `**kwargs`
    via_wrapper: bool = False  # the keywords also come from the wrapper's callers (the data pipeline)
    anchor: ast.AST | None = None  # where to report (the partial or the call)
    signature_only: bool = False  # the callee is the file's own re-definition: only its signature is compared


def _class_fully_known(module: str, cls: str) -> bool:
    """Whether every base of the class is read (bar ``nn.Module`` & co): an attribute it lacks is absent."""
    mro = upstream_mro(module, cls)
    return bool(mro) and all(e.node is not None or e.name in _LEAF_BASES for e in mro)


def method_kind(func: ast.FunctionDef) -> str:
    """``"method"``, ``"classmethod"``, ``"staticmethod"`` or ``"other"`` (a property or another decorator: what the
    attribute holds is not the function's call signature)."""
    kinds = set()
    for deco in func.decorator_list:
        name = last_name(deco)
        if isinstance(deco, ast.Call):
            continue  # `@auto_docstring(...)`, `@deprecate_kwarg(...)`: wrappers keeping the signature
        kinds.add(name)
    if "classmethod" in kinds:
        return "classmethod"
    if "staticmethod" in kinds:
        return "staticmethod"
    if kinds - {"auto_docstring", "can_return_tuple", "check_model_inputs", "torch.no_grad", "no_grad"}:
        return "other"
    return "method"


def upstream_method(module: str, cls: str, name: str) -> tuple[ast.FunctionDef | None, bool]:
    """The upstream method and whether the class is known well enough to say it has no such method."""
    found = upstream_class_method(module, cls, name)
    if found is not None:
        return found, True
    return None, _class_fully_known(module, cls)


def _submodule_class(module: str, cls: str, attr: str) -> tuple[str, str] | None:
    """The upstream class the upstream ``__init__`` of ``cls`` (or a base's) builds ``self.<attr>`` from."""
    for entry in upstream_mro(module, cls):
        if entry.node is None or entry.module is None:
            continue
        init = next(
            (s for s in entry.node.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None
        )
        if init is None:
            continue
        for node in walk(init):
            if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
                continue
            for target in node.targets:
                if (
                    isinstance(target, ast.Attribute)
                    and target.attr == attr
                    and isinstance(target.value, ast.Name)
                    and target.value.id == "self"
                    and isinstance(node.value.func, ast.Name)
                ):
                    found = upstream_class(entry.module, node.value.func.id)
                    return (found[0], found[1].name) if found else None
    return None


def scalar_expr(node: ast.expr, scope: ast.FunctionDef | None, depth: int = 0) -> bool:
    """Whether an expression is a Python number: an int literal, a builtin such as ``max(...)`` / ``len(...)``,
    arithmetic of those, or a local every assignment of which is one."""
    if depth > 4:
        return False
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int) and not isinstance(node.value, bool)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _SCALAR_CALLS:
        return True
    if isinstance(node, ast.BinOp):
        return scalar_expr(node.left, scope, depth + 1) and scalar_expr(node.right, scope, depth + 1)
    if isinstance(node, ast.Name) and scope is not None:
        values = []
        for stmt in walk(scope):
            if isinstance(stmt, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == node.id for t in stmt.targets
            ):
                values.append(stmt.value)
            elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign, ast.For, ast.With)) and any(
                isinstance(n, ast.Name) and n.id == node.id and isinstance(n.ctx, ast.Store)
                for n in walk(stmt)
            ):
                return False
            elif isinstance(stmt, ast.arg) and stmt.arg == node.id:
                return False
        return bool(values) and all(scalar_expr(v, scope, depth + 1) for v in values)
    return False


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef)}


def _classes(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {s.name: s for s in tree.body if isinstance(s, ast.ClassDef)}


def object_attributes(
    obj: ast.expr, scope: ast.FunctionDef | None, classes: dict[str, ast.ClassDef]
) -> set[str] | None:
    """The attributes an object built in ``scope`` carries: a ``SimpleNamespace(**kw)`` or an instance of a class
    of the file whose bases add none we cannot see (``SimpleNamespace``, ``object``), plus the attributes the
    function assigns on it. None when the object is anything else (a real model, a copy)."""
    if not isinstance(obj, ast.Name) or scope is None:
        return None
    built: list[ast.Call] = []
    for node in walk(scope):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == obj.id for t in node.targets
        ):
            if not isinstance(node.value, ast.Call):
                return None
            built.append(node.value)
    if len(built) != 1:
        return None
    call = built[0]
    name = call_name(call)
    if any(k.arg is None for k in call.keywords):
        return None
    attrs = {k.arg for k in call.keywords if k.arg}
    if name != "SimpleNamespace":
        cls = classes.get(name)
        if cls is None:
            return None
        for base in cls.bases:
            base_name = last_name(base)
            if base_name not in ("SimpleNamespace", "object"):
                return None
        for item in cls.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                attrs.add(item.name)
            elif isinstance(item, ast.Assign):
                attrs.update(t.id for t in item.targets if isinstance(t, ast.Name))
            elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                attrs.add(item.target.id)
        if any(getattr(i, "name", "") in ("__getattr__", "__getattribute__") for i in cls.body):
            return None
    elif call.args:
        return None
    for node in walk(scope):
        if isinstance(node, (ast.Attribute,)) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id == obj.id:
                attrs.add(node.attr)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
            if node.args and isinstance(node.args[0], ast.Name) and node.args[0].id == obj.id:
                return None
    return attrs


def _wrapper_supplied(wrapper: ast.FunctionDef, kwargs_name: str) -> set[str]:
    """Keys a wrapper puts into its ``**kwargs`` (``kwargs["k"] = v``, ``kwargs.setdefault("k", v)``,
    ``kwargs.update(k=v)``)."""
    out: set[str] = set()
    for node in walk(wrapper):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id == kwargs_name:
                key = node.slice
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    out.add(key.value)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == kwargs_name
        ):
            if node.func.attr == "setdefault" and node.args and isinstance(node.args[0], ast.Constant):
                out.add(str(node.args[0].value))
            elif node.func.attr == "update":
                out.update(k.arg for k in node.keywords if k.arg)
                for arg in node.args:
                    if isinstance(arg, ast.Dict):
                        out.update(str(k.value) for k in arg.keys if isinstance(k, ast.Constant))
    return out


def _method_ref(node: ast.expr, module: str, known: set[str]) -> tuple[str, str] | None:
    """``Cls.method`` where ``Cls`` is an upstream class name of ``module`` (or one the file defines as a copy)."""
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and (node.value.id in known or upstream_class(module, node.value.id) is not None)
    ):
        return node.value.id, node.attr
    return None


@dataclass
class MissingMethod:
    node: ast.Attribute
    cls: str
    name: str


@dataclass
class PatchFunctions:
    """The functions of a spec or generated file that run as patched upstream code, with their class."""

    module: str
    items: list[tuple[str | None, ast.FunctionDef]]  # (upstream class or None, function)
    own_methods: set[tuple[str, str]]  # (class, method) the file re-defines
    text: str
    functions: dict[str, ast.FunctionDef]
    classes: dict[str, ast.ClassDef]
    defs: dict[tuple[str, str], ast.FunctionDef]  # (class, method) -> the file's own definition of it


def patch_functions(tree: ast.Module, text: str, path: str, listed: set[str] | None) -> PatchFunctions | None:
    """Spec: every module-level function (a decorated override gets its class; `replacement=` registrations
    theirs; helpers none). Generated file: the methods of the banner's patched classes, and the module-level
    functions."""
    module = file_source_module(tree, text, path)
    if module is None or not module.startswith("transformers."):
        return None
    items: list[tuple[str | None, ast.FunctionDef]] = []
    own: set[tuple[str, str]] = set()
    defs: dict[tuple[str, str], ast.FunctionDef] = {}
    functions = _functions(tree)
    classes = _classes(tree)
    replaced: dict[str, str] = {}
    replaced_targets: dict[str, tuple[str, str]] = {}
    for stmt in tree.body:
        value = stmt.value if isinstance(stmt, ast.Expr) else None
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
            if (
                value.func.attr == "override_method"
                and value.args
                and isinstance(value.args[0], ast.Constant)
            ):
                target = str(value.args[0].value)
                for kw in value.keywords:
                    if kw.arg == "replacement" and isinstance(kw.value, ast.Name) and "." in target:
                        cls_name, _, method_name = target.rpartition(".")
                        replaced[kw.value.id] = cls_name
                        replaced_targets[kw.value.id] = (cls_name, method_name)
                        own.add((cls_name, method_name))
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef):
            target = _decorator_target(stmt)
            if target is not None:
                own.add(target)
                defs[target] = stmt
                items.append((target[0], stmt))
            else:
                items.append((replaced.get(stmt.name), stmt))
                if stmt.name in replaced_targets:
                    defs[replaced_targets[stmt.name]] = stmt
        elif isinstance(stmt, ast.ClassDef) and listed is not None:
            # a generated file: the listed methods are patched, the rest is the upstream code copied
            for m in stmt.body:
                if isinstance(m, ast.FunctionDef) and f"{stmt.name}.{m.name}" in listed:
                    own.add((stmt.name, m.name))
                    items.append((stmt.name, m))
                    defs[(stmt.name, m.name)] = m
    return PatchFunctions(module, items, own, text, functions, classes, defs)


def upstream_calls(pf: PatchFunctions) -> tuple[list[UpstreamCall], list[MissingMethod]]:
    """Every call of the patch functions into upstream code, and every ``Cls.method`` reference naming a method
    the upstream class lacks."""
    calls: list[UpstreamCall] = []
    missing: list[MissingMethod] = []
    module = pf.module
    known = set(pf.classes)
    seen: set[int] = set()
    for cls, func in pf.items:
        for node in nodes_of(func, ast.Attribute, ast.Call):  # the kinds read below, in walk order
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and id(node) not in seen:
                ref = _method_ref(node, module, known)
                if ref is not None and (ref[0], ref[1]) not in pf.own_methods and not ref[1].startswith("__"):
                    method, certain = upstream_method(module, ref[0], ref[1])
                    if method is None and certain and upstream_class(module, ref[0]) is not None:
                        if f'"{ref[0]}.{ref[1]}"' not in pf.text:
                            seen.add(id(node))
                            missing.append(MissingMethod(node, ref[0], ref[1]))
            if not isinstance(node, ast.Call):
                continue
            target = node.func
            # self.m(...) / self.sub(...)
            if (
                cls is not None
                and isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
            ):
                attr = target.attr
                mine = pf.defs.get((cls, attr))
                if mine is not None:
                    # the file's own definition runs: its signature is the contract (not its body's reads)
                    facts = callee_facts(mine, f"{cls}.{attr}")
                    calls.append(UpstreamCall(node, facts, True, anchor=node, signature_only=True))
                    continue
                if (cls, attr) in pf.own_methods or f'"{cls}.{attr}"' in pf.text:
                    continue
                method = upstream_class_method(module, cls, attr)
                if method is not None:
                    kind = method_kind(method)
                    if kind != "other":
                        facts = callee_facts(method, f"{cls}.{attr}")
                        calls.append(UpstreamCall(node, facts, kind != "staticmethod", anchor=node))
                    continue
                sub = _submodule_class(module, cls, attr)
                if sub is not None and (sub[1], "forward") not in pf.own_methods:
                    if f'"{sub[1]}.forward"' in pf.text or f'"{sub[1]}"' in pf.text:
                        continue
                    fwd = upstream_class_method(sub[0], sub[1], "forward")
                    if fwd is not None:
                        calls.append(
                            UpstreamCall(node, callee_facts(fwd, f"{sub[1]}.forward"), True, anchor=node)
                        )
                continue
            # Cls.m(obj, ...)
            ref = _method_ref(target, module, known) if isinstance(target, ast.Attribute) else None
            if ref is not None and ref not in pf.own_methods:
                method = upstream_class_method(module, ref[0], ref[1])
                kind = method_kind(method) if method is not None else "other"
                if (
                    method is not None
                    and kind != "other"
                    and not any(isinstance(a, ast.Starred) for a in node.args[:1])
                ):
                    unbound = kind == "method"
                    calls.append(
                        UpstreamCall(
                            node,
                            callee_facts(method, f"{ref[0]}.{ref[1]}"),
                            kind == "classmethod",
                            self_obj=node.args[0] if node.args and unbound else None,
                            scope=func,
                            anchor=node,
                        )
                    )
                continue
            # partial(wrapper, Cls.m, obj)
            if isinstance(target, ast.Name) and target.id == "partial" and len(node.args) >= 2:
                wrapped = calls_through_wrapper(node, func, pf)
                if wrapped is not None:
                    calls.append(wrapped)
    return calls, missing


def _nested(func: ast.FunctionDef, name: str) -> ast.FunctionDef | None:
    for node in walk(func):
        if isinstance(node, ast.FunctionDef) and node.name == name and node is not func:
            return node
    return None


def calls_through_wrapper(node: ast.Call, func: ast.FunctionDef, pf: PatchFunctions) -> UpstreamCall | None:
    """``partial(wrapper, Cls.m[, obj])``: the wrapper's ``main_func(self, ...)`` call runs ``Cls.m`` unbound."""
    first, second = node.args[0], node.args[1]
    if not isinstance(first, ast.Name):
        return None
    ref = _method_ref(second, pf.module, set(pf.classes))
    if ref is None or ref in pf.own_methods:
        return None
    method = upstream_class_method(pf.module, ref[0], ref[1])
    if method is None or method_kind(method) != "method":
        return None
    wrapper = _nested(func, first.id) or pf.functions.get(first.id)
    if wrapper is None:
        return None
    params = [a.arg for a in [*wrapper.args.posonlyargs, *wrapper.args.args]]
    if len(params) < 2:
        return None
    main, self_param = params[0], params[1]
    kwargs_name = wrapper.args.kwarg.arg if wrapper.args.kwarg is not None else None
    for inner in walk(wrapper):
        if (
            isinstance(inner, ast.Call)
            and isinstance(inner.func, ast.Name)
            and inner.func.id == main
            and inner.args
            and isinstance(inner.args[0], ast.Name)
            and inner.args[0].id == self_param
        ):
            supplied = _wrapper_supplied(wrapper, kwargs_name) if kwargs_name else set()
            spread = any(
                k.arg is None and isinstance(k.value, ast.Name) and k.value.id == kwargs_name
                for k in inner.keywords
            )
            return UpstreamCall(
                inner,
                callee_facts(method, f"{ref[0]}.{ref[1]}"),
                False,
                self_obj=node.args[2] if len(node.args) > 2 else None,
                scope=func,
                supplied=supplied,
                via_wrapper=spread,
                anchor=node,
            )
    return None


# -- the data pipeline's side: what every caller of a model's position-id function passes ---------------------

_PIPELINE: Bounded[str, tuple[tuple[tuple[str, int], ...], frozenset[str]]] = Bounded(16)
DEFAULT_PIPELINE_KEYS = frozenset({"input_ids", "attention_mask"})


def _call_keys(call: ast.Call, scope: ast.AST) -> set[str]:
    keys = {k.arg for k in call.keywords if k.arg}
    for k in call.keywords:
        if k.arg is None and isinstance(k.value, ast.Name):
            name = k.value.id
            for node in walk(scope):
                if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == name for t in node.targets
                ):
                    if isinstance(node.value, ast.Dict):
                        keys.update(str(x.value) for x in node.value.keys if isinstance(x, ast.Constant))
                elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
                    if isinstance(node.value, ast.Name) and node.value.id == name:
                        if isinstance(node.slice, ast.Constant):
                            keys.add(str(node.slice.value))
    return keys


def pipeline_position_keys(root: str | None) -> frozenset[str]:
    """The keywords every ``position_id_func(...)`` call of the tree's data package passes for sure (a spread
    of a dict built elsewhere adds nothing for sure). Without a tree: input ids and attention mask."""
    from npu_lint.veomni.patchgen import load_file

    if root is None:
        return DEFAULT_PIPELINE_KEYS
    data = os.path.join(root, "data")
    files: list[str] = []
    for base, _dirs, names in os.walk(data):
        files.extend(os.path.join(base, n) for n in names if n.endswith(".py"))
    stamp = []
    for f in sorted(files):
        try:
            stamp.append((f, os.stat(f).st_mtime_ns))
        except OSError:
            continue
    hit = _PIPELINE.get(data)
    if hit is not None and hit[0] == tuple(stamp):
        return hit[1]
    sets: list[set[str]] = []
    for f, _ in stamp:
        parsed = load_file(f)
        if parsed is None or parsed.tree is None or "position_id_func(" not in parsed.text:
            continue
        for fn in walk(parsed.tree):
            if not isinstance(fn, ast.FunctionDef):
                continue
            for node in walk(fn):
                if isinstance(node, ast.Call):
                    name = call_name(node)
                    if name == "position_id_func":
                        sets.append(_call_keys(node, fn))
    keys = frozenset(set.intersection(*sets)) if sets else DEFAULT_PIPELINE_KEYS
    _PIPELINE[data] = (tuple(stamp), keys)
    return keys


# What transformers' attention functions read from the module they are handed (``attention_interface(self, q, k,
# v, ...)``) without a default: ``flash_attention_forward`` reads ``module.config._attn_implementation`` (and
# ``module.config`` for quantised models) unconditionally; ``is_causal`` and ``layer_idx`` have fallbacks.
ATTENTION_MODULE_ATTRIBUTES = ("config",)


def _attention_registry(node: ast.AST | None) -> bool:
    """An attention function looked up in a registry of them (`ALL_ATTENTION_FUNCTIONS[impl]`,
    `WAN_ATTENTION_FUNCTIONS.get(impl)`, `ALL_ATTENTION_FUNCTIONS.get_interface(impl, default)`)."""
    if isinstance(node, ast.Subscript):
        node = node.value
    elif (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr
        in (
            "get",
            "get_interface",
        )
    ):
        node = node.func.value
    else:
        return False
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name.endswith("ATTENTION_FUNCTIONS")


def attention_module_gaps(cls: ast.ClassDef) -> list[tuple[ast.AST, str]]:
    """Where ``cls`` hands ``self`` to an attention function from a registry (a ``self.<attr>`` its methods bound
    to one, or a local bound to one) while no method of the class sets an attribute those functions read
    (``ATTENTION_MODULE_ATTRIBUTES``), with the attribute missing: one place per class, the binding of the
    function to ``self`` when there is one (where the attribute belongs), else the first call. A class with a
    base besides ``nn.Module`` (a mixin or a transformers class may set it), a class attribute of that name,
    ``setattr`` or ``__getattr__`` is not judged."""
    if any(
        (b.id if isinstance(b, ast.Name) else getattr(b, "attr", "")) not in _LEAF_BASES for b in cls.bases
    ):
        return []
    methods = [s for s in cls.body if isinstance(s, ast.FunctionDef)]
    if any(m.name in ("__getattr__", "__getattribute__") for m in methods):
        return []
    declared = {
        t.id
        for s in cls.body
        if isinstance(s, (ast.Assign, ast.AnnAssign))
        for t in (s.targets if isinstance(s, ast.Assign) else [s.target])
        if isinstance(t, ast.Name)
    }
    # the class's nodes from the file's one index (no walk of its own); the cheap exits first
    assigns = nodes_of(cls, ast.Assign, ast.AnnAssign)
    set_attrs: set[str] = set()
    bound: set[str] = set()  # self.<attr> holding an attention function
    local: set[str] = set()  # locals holding one
    binding: ast.AST | None = None  # the first such binding (in `__init__`, where the missing attribute goes)
    for n in assigns:
        assert isinstance(n, (ast.Assign, ast.AnnAssign))
        registry = n.value is not None and _attention_registry(n.value)
        for t in n.targets if isinstance(n, ast.Assign) else [n.target]:
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                set_attrs.add(t.attr)
                if registry:
                    bound.add(t.attr)
                    binding = binding or n
            elif registry and isinstance(t, ast.Name):
                local.add(t.id)
    missing = [a for a in ATTENTION_MODULE_ATTRIBUTES if a not in set_attrs and a not in declared]
    if not missing:
        return []
    out: list[tuple[ast.Call, str]] = []
    for n in nodes_of(cls, ast.Call):
        assert isinstance(n, ast.Call)
        if isinstance(n.func, ast.Name) and n.func.id == "setattr":
            return []
        if not (n.args and isinstance(n.args[0], ast.Name) and n.args[0].id == "self"):
            continue
        func = n.func
        if (
            (isinstance(func, ast.Name) and func.id in local)
            or (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and func.value.id == "self"
                and func.attr in bound
            )
            or _attention_registry(func)
        ):
            out.append((n, missing[0]))
    if out and binding is not None:
        return [(binding, missing[0])]  # type: ignore[list-item]
    return out[:1]
