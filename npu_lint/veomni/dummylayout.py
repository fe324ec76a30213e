"""The layout a modality tower's input arrives in, read from the tower's own ``dummy_forward``.

VeOmni's towers (audio encoders, ViTs) get a ``dummy_forward`` that text-only ranks run so FSDP's collectives stay
symmetric; it builds a fake input in the layout the real data has (Qwen3-Omni's audio encoder:
``torch.zeros((min_len, self.num_mel_bins))``, the collator's flat ``(len, num_mel_bins)`` features) and hands it
to the tower's ``forward``. That shape is the file's own statement of the input's layout: which axis is a
feature size (``num_mel_bins``, ``in_channels``, ``hidden_size``) and which a length. The tower's ``forward``
must read the input in that layout (or permute it first, as the Qwen3-Omni spec does to reach upstream's
``(num_mel_bins, len)``). Read statically, per file tree.
"""

from __future__ import annotations

import ast
import re

from npu_lint.core.memo import per_tree
from npu_lint.veomni.upstream import decorator_target

_FACTORIES = frozenset(
    {"zeros", "ones", "empty", "randn", "rand", "full", "new_zeros", "new_ones", "new_empty", "new_full"}
)
# an axis named for a feature size (not a length): the mel bins, the channels, the hidden or embedding size
FEATURE_AXIS = re.compile(
    r"(bins|channels|chans|hidden_size|hidden_dim|embed_dim|feature_size|features|in_dim)$"
)
# calls that keep a tensor's axes where they are
_KEEP = frozenset({"contiguous", "to", "float", "half", "bfloat16", "type", "clone", "detach", "type_as"})

Layout = tuple[
    str | None, ...
]  # one label per axis: the name of its size (`num_mel_bins`, `min_len`), or None


def _label(node: ast.expr) -> str | None:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def _shape(call: ast.Call) -> Layout | None:
    """The axis labels of a tensor factory call: ``torch.zeros((a, self.b), ...)`` or ``torch.zeros(a, self.b)``."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr in _FACTORIES):
        return None
    if not call.args:
        return None
    first = call.args[0]
    dims = (
        first.elts
        if isinstance(first, (ast.Tuple, ast.List))
        else [a for a in call.args if not isinstance(a, ast.Starred)]
    )
    if func.attr in ("full", "new_full") and not isinstance(first, (ast.Tuple, ast.List)):
        return None
    if len(dims) < 2:
        return None
    return tuple(_label(d) for d in dims)


def _owner(func: ast.FunctionDef, parents: dict[int, str]) -> tuple[str, str] | None:
    """(class, method) a function is: a method of a class of the file, or a spec's override of one."""
    target = decorator_target(func)
    if target is not None:
        return target
    cls = parents.get(id(func))
    return (cls, func.name) if cls is not None else None


@per_tree
def _file_layouts(tree: ast.AST) -> dict[str, dict[str, Layout]]:
    out: dict[str, dict[str, Layout]] = {}
    if not isinstance(tree, ast.Module):
        return out
    parents: dict[int, str] = {}
    funcs: list[ast.FunctionDef] = []
    for stmt in tree.body:
        if isinstance(stmt, ast.ClassDef):
            for item in stmt.body:
                if isinstance(item, ast.FunctionDef):
                    parents[id(item)] = stmt.name
                    funcs.append(item)
        elif isinstance(stmt, ast.FunctionDef):
            funcs.append(stmt)
    for func in funcs:
        owner = _owner(func, parents)
        if owner is None or owner[1] != "dummy_forward":
            continue
        built: dict[str, Layout] = {}
        calls: list[ast.Call] = []
        for node in ast.walk(func):
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Call)
            ):
                shape = _shape(node.value)
                if shape is not None:
                    built[node.targets[0].id] = shape
            elif isinstance(node, ast.Call) and (
                (isinstance(node.func, ast.Name) and node.func.id == "self")
                or (
                    isinstance(node.func, ast.Attribute)
                    and node.func.attr == "forward"
                    and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "self"
                )
            ):
                calls.append(node)
        if not built:
            continue
        params = out.setdefault(owner[0], {})
        for call in calls:
            for kw in call.keywords:
                if kw.arg and isinstance(kw.value, ast.Name) and kw.value.id in built:
                    params[kw.arg] = built[kw.value.id]
            for i, arg in enumerate(call.args):
                if isinstance(arg, ast.Name) and arg.id in built:
                    params[f"#{i}"] = built[arg.id]  # positional: the forward's i-th parameter after self
    return out


def dummy_input_layouts(tree: ast.AST, cls: str) -> dict[str, Layout]:
    """Parameter name (or ``#i``, the i-th after ``self``) -> the axis labels of the fake input the class's
    ``dummy_forward`` hands it, as this file defines (or patches) that method."""
    return _file_layouts(tree).get(cls, {})


def forward_owner(tree: ast.AST, func: ast.FunctionDef) -> str | None:
    """The class whose ``forward`` ``func`` is (a method of a class of the file, or a spec's override)."""
    target = decorator_target(func)
    if target is not None:
        return target[0] if target[1] == "forward" else None
    if func.name != "forward" or not isinstance(tree, ast.Module):
        return None
    for stmt in tree.body:
        if isinstance(stmt, ast.ClassDef) and func in stmt.body:
            return stmt.name
    return None


def relaid(value: ast.expr, name: str, layout: Layout) -> Layout | None:
    """The layout of ``value`` computed from ``name`` (held in ``layout``): ``x.permute(1, 0)``, ``x.T``,
    ``x.transpose(0, 1)``, or a call keeping the axes (``x.contiguous()``, ``x.to(dtype)``, ``x`` itself); None
    when the value is anything else (the axes are no longer known)."""
    if isinstance(value, ast.Name):
        return layout if value.id == name else None
    if isinstance(value, ast.Attribute) and value.attr in ("T", "mT"):
        inner = relaid(value.value, name, layout)
        if inner is None:
            return None
        return tuple(reversed(inner)) if value.attr == "T" else (*inner[:-2], inner[-1], inner[-2])
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)):
        return None
    inner = relaid(value.func.value, name, layout)
    if inner is None:
        return None
    attr = value.func.attr
    if attr in _KEEP:
        return inner
    ints = [a.value for a in value.args if isinstance(a, ast.Constant) and type(a.value) is int]
    if len(value.args) == 1 and isinstance(value.args[0], (ast.Tuple, ast.List)):
        ints = [e.value for e in value.args[0].elts if isinstance(e, ast.Constant) and type(e.value) is int]
        if len(ints) != len(value.args[0].elts):
            return None
    elif len(ints) != len(value.args):
        return None
    if attr == "t" and not ints and len(inner) == 2:
        return tuple(reversed(inner))
    if attr == "permute" and sorted(i % len(inner) for i in ints) == list(range(len(inner))):
        return tuple(inner[i] for i in ints)
    if attr in ("transpose", "swapaxes") and len(ints) == 2:
        a, b = (i % len(inner) for i in ints)
        out = list(inner)
        out[a], out[b] = out[b], out[a]
        return tuple(out)
    return None
