"""The media arguments a call of the model's position-id function must supply.

A position-id function (the model's ``get_rope_index`` and its relatives, the data pipeline's ``position_id_func``)
takes the sample's media layout as optional parameters (``image_grid_thw``, ``audio_seqlens``,
``second_per_grids``). Some of them are optional in the signature only: the function indexes them on a medium's path
without ever testing them for None (Qwen-Omni's ``second_per_grids[video_idx]``, ``audio_seqlens[audio_idx]``), so
a call that leaves one out fails, or is wrong, as soon as a sample holds that medium. Others are truly optional (the
body falls back when they are None: Qwen2.5-VL's ``second_per_grid_ts``).

:func:`reached_definitions` names the definitions a call can reach: the file's own definition of the called name (a
spec's replacement, a generated file's patched method), else the upstream module the file copies (its banner, its
spec's ``source_module``); for ``position_id_func``, the ``get_rope_index`` of every model type the calling function
is registered for (``@<...>REGISTRY.register("<model_type>")`` on it or on a function of the module that calls it),
read from the installed transformers (``transformers.models.<type>.modeling_<type>``), never imported.
:func:`needed_parameters` states, per definition, the parameters it indexes unguarded.
"""

from __future__ import annotations

import ast
import re

from npu_lint.core.astutil import last_name, walk
from npu_lint.core.memo import Bounded
from npu_lint.veomni.upstream import (
    decorator_target,
    module_path,
    upstream_class_method,
    upstream_class_names,
)

__all__ = [
    "is_position_method",
    "needed_parameters",
    "reached_definitions",
    "registered_model_types",
    "PIPELINE_NAMES",
]

# the data pipeline's handle on the model's position-id function
PIPELINE_NAMES = frozenset({"position_id_func", "position_ids_func", "position_id_fn"})
# the model's own position-id methods
_METHOD_NAMES = ("get_rope_index",)
# the methods that compute a medium's positions (`get_vision_position_ids`, `compute_3d_position_ids`,
# `get_llm_pos_ids_for_vision`, `get_rope_index`)
_POSITION_METHOD = re.compile(r"rope_index|position_ids|pos_ids")


def is_position_method(name: str) -> bool:
    """Whether a called name is one of the model's position-id methods, or the data pipeline's handle on one."""
    return name in PIPELINE_NAMES or _POSITION_METHOD.search(name) is not None and name != "position_ids"


_NEEDED: Bounded = Bounded(256)


def _none_tested(func: ast.FunctionDef, name: str) -> bool:
    """Whether ``func`` tests ``name`` for None or truth anywhere (``x is None``, ``if x``, ``x or y``, ``not x``)."""
    for node in walk(func):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(isinstance(o, ast.Name) and o.id == name for o in operands) and any(
                isinstance(o, ast.Constant) and o.value is None for o in operands
            ):
                return True
        elif isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
            if isinstance(node.test, ast.Name) and node.test.id == name:
                return True
        elif isinstance(node, ast.BoolOp):
            if any(isinstance(v, ast.Name) and v.id == name for v in node.values):
                return True
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            if isinstance(node.operand, ast.Name) and node.operand.id == name:
                return True
        elif isinstance(node, ast.Call) and last_name(node.func) in (
            "getattr",
            "hasattr",
            "isinstance",
            "is_tensor",
            "len",
        ):
            if any(isinstance(a, ast.Name) and a.id == name for a in node.args):
                return True
    return False


def needed_parameters(func: ast.FunctionDef) -> frozenset[str]:
    """Parameters of ``func`` with a default that its body indexes (``p[i]``) although it never tests them for None
    and never rebinds them: optional in the signature, needed on the path that indexes them."""
    hit = _NEEDED.get(id(func))
    if hit is not None and hit[0] is func:
        return hit[1]  # type: ignore[no-any-return]
    args = func.args
    positional = [*args.posonlyargs, *args.args]
    # only a None default leaves the parameter unset (a tuple default such as `merge_sizes=(2, 2)` is a value)
    defaulted = {
        a.arg
        for a, d in zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=False)
        if isinstance(d, ast.Constant) and d.value is None
    }
    defaulted |= {
        a.arg
        for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=False)
        if isinstance(d, ast.Constant) and d.value is None
    }
    indexed: set[str] = set()
    rebound: set[str] = set()
    for node in walk(func):
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and isinstance(node.ctx, ast.Load)
        ):
            if node.value.id in defaulted:
                indexed.add(node.value.id)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id in defaulted:
            rebound.add(node.id)
    out = frozenset(p for p in indexed - rebound if not _none_tested(func, p))
    _NEEDED[id(func)] = (func, out)
    return out


def registered_model_types(func: ast.FunctionDef | ast.AsyncFunctionDef, tree: ast.Module) -> tuple[str, ...]:
    """Model types ``func`` serves: the keys of ``@<...>REGISTRY.register("<type>")`` decorators on it, or, when it
    has none, on the module-level functions that call it (one hop: a registered transform delegating to a shared
    body)."""

    def keys(fn: ast.AST) -> list[str]:
        out: list[str] = []
        for deco in getattr(fn, "decorator_list", []):
            if (
                isinstance(deco, ast.Call)
                and isinstance(deco.func, ast.Attribute)
                and deco.func.attr == "register"
                and (last_name(deco.func.value) or "").endswith("REGISTRY")
                and deco.args
                and isinstance(deco.args[0], ast.Constant)
                and isinstance(deco.args[0].value, str)
            ):
                out.append(deco.args[0].value)
        return out

    own = keys(func)
    if own:
        return tuple(own)
    found: list[str] = []
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt is not func:
            if any(isinstance(n, ast.Call) and last_name(n.func) == func.name for n in walk(stmt)):
                found.extend(k for k in keys(stmt) if k not in found)
    return tuple(found)


def _upstream_methods(module: str, name: str) -> list[tuple[str, ast.FunctionDef]]:
    """Each distinct definition of method ``name`` among the classes of upstream ``module`` (inherited ones
    once)."""
    out: list[tuple[str, ast.FunctionDef]] = []
    seen: set[int] = set()
    for cls in upstream_class_names(module):
        method = upstream_class_method(module, cls, name)
        if method is not None and id(method) not in seen:
            seen.add(id(method))
            out.append((f"{cls}.{name}", method))
    return out


def _defines(func: ast.FunctionDef, name: str) -> bool:
    """``func`` is ``name`` (a generated file's method) or a spec's replacement of ``<Cls>.name``."""
    if func.name == name:
        return True
    target = decorator_target(func)
    return target is not None and target[1] == name


def reached_definitions(
    call: ast.Call,
    scope: ast.FunctionDef | ast.AsyncFunctionDef,
    tree: ast.Module,
    source_module: str | None,
) -> list[tuple[str, ast.FunctionDef]]:
    """The definitions a position-id call can run, each with a label: (label, definition)."""
    name = last_name(call.func) or ""
    if name in PIPELINE_NAMES:
        out: list[tuple[str, ast.FunctionDef]] = []
        for model_type in registered_model_types(scope, tree):
            module = f"transformers.models.{model_type}.modeling_{model_type}"
            if module_path(module) is None:
                continue
            for method_name in _METHOD_NAMES:
                out.extend(_upstream_methods(module, method_name))
        return out
    if not is_position_method(name):
        return []
    local = [n for n in walk(tree) if isinstance(n, ast.FunctionDef) and n is not scope and _defines(n, name)]
    if (
        isinstance(call.func, ast.Attribute)
        and isinstance(call.func.value, ast.Name)
        and call.func.value.id == "self"
    ):
        # `self.<name>(...)` in a class that defines `<name>` runs that class's definition, not a sibling class's
        for cls in walk(tree):
            if isinstance(cls, ast.ClassDef) and scope in cls.body:
                own = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n in local]
                if own:
                    local = own
                break
    if local:
        return [(name, fn) for fn in local]
    if source_module and module_path(source_module) is not None:
        return _upstream_methods(source_module, name)
    return []
