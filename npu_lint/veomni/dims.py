"""Spatial dimension names and layouts: which local names hold a height or a width, and which layout a value
spells in its name (VeOmni's and the Qwen-VL family's ``grid_thw`` rows are ``(t, h, w)``).

Two conventions hold in every layout a VeOmni data transform or model sees, channels first or last
(``(N, C, H, W)``, ``(T, C, H, W)``, ``(H, W, C)``, ``(T, H, W, C)``): height comes before width in a tensor's
``shape``, and a media grid named after its layout (``image_grid_thw``, ``grid_hw``) lists its dimensions in
the order of its name. PIL's ``Image.size`` is the one common ``(width, height)`` pair: it is an attribute,
never a ``shape``, and is never read here.

* ``axis_of(name)``: ``"h"`` / ``"w"`` / ``"t"`` for a name holding a height, a width or a frame count
  (``height``, ``h``, ``grid_h``, ``resized_width``, ``W_even``, ``num_frames``), else None.
* ``layout_letters(name)``: the dimension letters a layout-named value spells (``grid_thw`` -> ``"thw"``),
  else None.
* ``upstream_params(qualname)``: the positional parameter names of a top-level function of an installed
  transformers module (``transformers.models.qwen2_vl.image_processing_qwen2_vl.smart_resize``), else None.
* ``shape_source(expr)``: whether ``expr`` reads a tensor's shape (``x.shape``, ``x.shape[a:b]``, ``x.size()``,
  ``np.shape(x)``), with the base expression's text.
"""

from __future__ import annotations

import ast
import re

from npu_lint.core.astutil import int_value

__all__ = ["axis_of", "layout_letters", "shape_index", "shape_source", "upstream_params"]

_SPLIT = re.compile(r"_+|(?<=[a-z0-9])(?=[A-Z])")
_AXES = {
    "h": "h",
    "height": "h",
    "heights": "h",
    "w": "w",
    "width": "w",
    "widths": "w",
    "t": "t",
    "frames": "t",
}
# names that hold something else under a dimension-like word
_NOT_DIM = frozenset({"hidden", "head", "heads", "weight", "weights", "window", "word", "words"})
_LAYOUT = re.compile(r"(?:^|_)(t?hw)(?:_|$|s$)")


def axis_of(name: str) -> str | None:
    """``"h"``, ``"w"`` or ``"t"`` when ``name`` holds one spatial/temporal dimension, else None. A name with
    both a height and a width word (``hw``, ``height_width``) holds none."""
    parts = [p.lower().rstrip("0123456789") for p in _SPLIT.split(name) if p]
    if not parts or any(p in _NOT_DIM for p in parts):
        return None
    found = {_AXES[p] for p in parts if p in _AXES}
    if len(found) != 1:
        return None
    return next(iter(found))


def layout_letters(name: str) -> str | None:
    """The dimension letters (``"thw"``, ``"hw"``) a value spells in its name (``image_grid_thw``,
    ``grid_hw``, ``video_grid_thw_list``), else None."""
    match = _LAYOUT.search(name.lower())
    return match.group(1) if match is not None else None


def shape_source(expr: ast.expr) -> tuple[str, int] | None:
    """``(base text, first axis)`` when ``expr`` is a whole shape or a slice of one read from the start or
    from a constant axis (``x.shape``, ``x.size()``, ``x.shape[2:]``, ``x.shape[-2:]``, ``np.shape(x)``),
    else None. The first axis is the slice's constant start (0 for a whole shape)."""
    start = 0
    if isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Slice):
        sl = expr.slice
        if sl.step is not None or sl.upper is not None and int_value(sl.upper) is None:
            return None
        if sl.lower is not None:
            low = int_value(sl.lower)
            if low is None:
                return None
            start = low
        expr = expr.value
    base = _shape_base(expr)
    return None if base is None else (base, start)


def shape_index(expr: ast.expr) -> tuple[str, int] | None:
    """``(base text, axis)`` for one axis of a shape read with a constant index (``x.shape[2]``,
    ``x.shape[-1]``, ``x.size(3)``, ``x.size(dim=-2)``), else None."""
    if isinstance(expr, ast.Subscript) and not isinstance(expr.slice, ast.Slice):
        axis = int_value(expr.slice)
        base = _shape_base(expr.value)
        if axis is not None and base is not None:
            return base, axis
        return None
    if (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Attribute)
        and expr.func.attr == "size"
        and len(expr.args) + len(expr.keywords) == 1
    ):
        arg = expr.args[0] if expr.args else expr.keywords[0].value
        if expr.keywords and expr.keywords[0].arg != "dim":
            return None
        axis = int_value(arg)
        if axis is not None:
            return ast.unparse(expr.func.value), axis
    return None


def _shape_base(expr: ast.expr) -> str | None:
    if isinstance(expr, ast.Attribute) and expr.attr == "shape":
        return ast.unparse(expr.value)
    if isinstance(expr, ast.Call) and not expr.keywords:
        func = expr.func
        if isinstance(func, ast.Attribute) and func.attr == "size" and not expr.args:
            return ast.unparse(func.value)
        if (
            isinstance(func, ast.Attribute)
            and func.attr == "shape"
            and isinstance(func.value, ast.Name)
            and func.value.id in {"np", "numpy", "torch"}
            and len(expr.args) == 1
        ):
            return ast.unparse(expr.args[0])
    return None


def upstream_params(qualname: str) -> list[str] | None:
    """The positional parameters of the top-level function ``qualname`` of an installed transformers module
    (read from its source, never imported), or None."""
    if not qualname.startswith("transformers.") or "." not in qualname:
        return None
    from npu_lint.veomni.patchgen import load_file
    from npu_lint.veomni.upstream import upstream_path

    module, _, name = qualname.rpartition(".")
    path = upstream_path(module)
    parsed = load_file(str(path)) if path is not None else None
    tree = parsed.tree if parsed is not None else None
    if tree is None:
        return None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return [a.arg for a in (*node.args.posonlyargs, *node.args.args)]
    return None
