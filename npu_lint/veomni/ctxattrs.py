"""What an autograd Function's ``ctx`` carries from its forward to its backward.

``torch.autograd.Function`` subclasses hand state to their backward on ``ctx``: ``ctx.group = group``,
``ctx.save_for_backward(...)``. A backward that reads ``ctx.<name>`` no method of the class ever sets raises
``AttributeError`` on the first backward pass (a forward that lost its ``ctx.unpadded_dim_size = ...`` line).
"""

from __future__ import annotations

import ast

from npu_lint.core.astutil import dotted_name, nodes_of

# attributes torch itself puts on every ctx
CTX_BUILTINS = frozenset(
    {
        "saved_tensors",
        "saved_variables",
        "needs_input_grad",
        "save_for_backward",
        "save_for_forward",
        "mark_dirty",
        "mark_non_differentiable",
        "set_materialize_grads",
        "materialize_grads",
        "to_save",
        "non_differentiable",
        "dirty_tensors",
        "next_functions",
        "metadata",
        "__dict__",
    }
)


def _is_function_class(cls: ast.ClassDef) -> bool:
    """A direct ``torch.autograd.Function`` subclass with no other base (a mixin may set anything on ctx)."""
    names = [(dotted_name(b) or "").rsplit(".", 1)[-1] for b in cls.bases]
    return bool(names) and all(n == "Function" for n in names)


def _ctx_param(method: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """The parameter ``ctx`` arrives in: the first, or the second of a ``classmethod``."""
    params = [*method.args.posonlyargs, *method.args.args]
    classmethod = any((dotted_name(d) or "") == "classmethod" for d in method.decorator_list)
    index = 1 if classmethod else 0
    return params[index].arg if len(params) > index else None


def unset_ctx_reads(cls: ast.ClassDef) -> list[ast.Attribute]:
    """The first read of each ``ctx.<name>`` in the class's ``backward`` that no method of the class assigns
    (and torch does not provide). Nothing when ``ctx`` escapes (handed to a call, where a helper or
    ``setattr`` may set it, aliased, or its ``__dict__`` reached), or the class is not a plain
    ``torch.autograd.Function``."""
    if not _is_function_class(cls):
        return []
    methods = [s for s in cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))]
    backward = next((m for m in methods if m.name == "backward"), None)
    if backward is None or _ctx_param(backward) is None:
        return []
    written: set[str] = set()
    for method in methods:
        ctx = _ctx_param(method)
        if ctx is None:
            continue
        attr_bases: set[int] = set()
        for node in nodes_of(method, ast.Attribute):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == ctx:
                attr_bases.add(id(node.value))
                if node.attr == "__dict__":
                    return []  # ``ctx.__dict__.update(...)`` may set anything
                if not isinstance(node.ctx, ast.Load):
                    written.add(node.attr)
        for node in nodes_of(method, ast.Name):
            if isinstance(node, ast.Name) and node.id == ctx and id(node) not in attr_bases:
                return []  # handed to a helper (or setattr), or aliased: it may set anything
    ctx = _ctx_param(backward)
    out: list[ast.Attribute] = []
    seen: set[str] = set()
    for node in nodes_of(backward, ast.Attribute):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == ctx
            and isinstance(node.ctx, ast.Load)
            and node.attr not in written
            and node.attr not in CTX_BUILTINS
            and not node.attr.startswith("_")
            and node.attr not in seen
        ):
            seen.add(node.attr)
            out.append(node)
    return out
