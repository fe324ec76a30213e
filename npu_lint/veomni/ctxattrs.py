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
    return any((dotted_name(b) or "").rsplit(".", 1)[-1] == "Function" for b in cls.bases)


def unset_ctx_reads(cls: ast.ClassDef) -> list[ast.Attribute]:
    """The first read of each ``ctx.<name>`` in the class's ``backward`` that no method of the class assigns
    (and torch does not provide). Nothing when ``ctx`` is handed to a call (a helper may set it), set with
    ``setattr``, or the class is not a ``torch.autograd.Function``."""
    if not _is_function_class(cls):
        return []
    methods = [s for s in cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))]
    backward = next((m for m in methods if m.name == "backward"), None)
    if backward is None or not backward.args.args:
        return []
    names = {m.name: (m.args.args[0].arg if m.args.args else None) for m in methods}
    written: set[str] = set()
    for method in methods:
        ctx = names[method.name]
        if ctx is None:
            continue
        for node in nodes_of(method, ast.Attribute, ast.Call):
            if isinstance(node, ast.Attribute):
                if (
                    isinstance(node.value, ast.Name)
                    and node.value.id == ctx
                    and not isinstance(node.ctx, ast.Load)
                ):
                    written.add(node.attr)
            elif isinstance(node, ast.Call):
                args = [*node.args, *(k.value for k in node.keywords)]
                if any(isinstance(a, ast.Name) and a.id == ctx for a in args):
                    return []  # a helper (or setattr) may set anything
    ctx = backward.args.args[0].arg
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
