"""The collator's data contract: how each batch key is packed and whether it is cut across sequence-parallel ranks.

VeOmni's collator (``veomni/data/data_collator.py``) keys every batch field to a ``DataCollateInfo(pack_dim,
sp_slice, sp_pad_value, sp_pad_scale)``: ``DEFAULT_DATA_COLLATE_INFO`` for the common fields, extended per model by
``get_extra_collate_infos()`` (the omni models' audio fields). ``sp_slice`` decides whether the collator cuts the
field to this rank's share of the sequence; the model code that consumes it assumes one answer (a media payload is
cut and all-gathered again by its encoder; a placeholder mask is used on the gathered full sequence, uncut).

* ``collate_table(text)``: the ``{key: (pack_dim, sp_slice, pad_value, pad_scale)}`` entries a dict literal of a
  module holds (``DataCollateInfo(...)`` calls or plain 4-tuples); constants only.
* ``default_table(path)``: the tree's own ``DEFAULT_DATA_COLLATE_INFO`` (read from ``veomni/data/
  data_collator.py`` of the tree ``path`` lives in, once per file stamp; empty when that tree has none), and the
  contract as VeOmni main ships it only for a file outside any VeOmni tree.
* ``role_of(key, entry)``: the role a field plays (``mask``, ``payload``, ``metadata``, ``tokens``), from its name
  and its packing; fields of one role share one slicing answer in the default table.
"""

from __future__ import annotations

import ast
import functools
import os

from npu_lint.core.astutil import call_name
from npu_lint.veomni.patchgen import load_file, veomni_root_of

__all__ = ["Entry", "collate_entries", "default_table", "role_of"]

Entry = tuple[object, object, object, object]  # pack_dim, sp_slice, sp_pad_value, sp_pad_scale
_FIELDS = ("pack_dim", "sp_slice", "sp_pad_value", "sp_pad_scale")
_UNKNOWN = object()

# VeOmni main's DEFAULT_DATA_COLLATE_INFO (the reference when the linted file is not inside a VeOmni tree)
_SHIPPED: dict[str, Entry] = {
    "input_ids": (-1, True, 0, 1),
    "labels": (-1, True, -100, 1),
    "attention_mask": (-1, False, 1, 1),
    "position_ids": (-1, False, 0, 1),
    "pixel_values": (0, True, 0, 4),
    "pixel_values_videos": (0, True, 0, 4),
    "image_mask": (-1, False, 0, 1),
    "video_mask": (-1, False, 0, 1),
    "image_grid_hw": (0, False, None, None),
    "image_grid_thw": (0, False, None, None),
    "video_grid_thw": (0, False, None, None),
}


def _const(node: ast.expr) -> object:
    if isinstance(node, ast.Constant):
        return node.value
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
    ):
        value = node.operand.value
        return -value if isinstance(value, (int, float)) and not isinstance(value, bool) else _UNKNOWN
    return _UNKNOWN


def entry_of(node: ast.expr) -> Entry | None:
    """``(-1, False, 0, 1)`` or ``DataCollateInfo(-1, False, 0, 1)`` / keywords: the four fields (an unreadable
    field stays unknown); None for any other value."""
    if isinstance(node, ast.Tuple) and len(node.elts) == 4:
        values = [_const(e) for e in node.elts]
    elif isinstance(node, ast.Call) and len(node.args) + len(node.keywords) == 4:
        name = call_name(node)
        if name != "DataCollateInfo":
            return None
        values = [_const(a) for a in node.args]
        by_kw = {k.arg: _const(k.value) for k in node.keywords if k.arg}
        values += [by_kw.get(f, _UNKNOWN) for f in _FIELDS[len(values) :]]
    else:
        return None
    return tuple(values)  # type: ignore[return-value]


def collate_entries(node: ast.Dict) -> list[tuple[str, Entry, ast.expr]]:
    """The ``(key, entry, value node)`` rows of a dict literal whose values are collate infos."""
    out = []
    for key, value in zip(node.keys, node.values, strict=False):
        if isinstance(key, ast.Constant) and isinstance(key.value, str) and value is not None:
            entry = entry_of(value)
            if entry is not None:
                out.append((key.value, entry, value))
    return out


def default_table(path: str) -> dict[str, Entry]:
    """The tree's ``DEFAULT_DATA_COLLATE_INFO``; empty when the tree has none (a partial tree, another collator:
    the shipped contract would name fields this tree may not have); the shipped contract outside any tree."""
    root = veomni_root_of(path) if path and not path.startswith("<") else None
    if root is None or not os.path.isdir(os.path.join(root, "veomni")):
        return (
            _SHIPPED  # no tree on disk (an unsaved buffer, a snippet): the contract as VeOmni main ships it
        )
    collator = os.path.join(root, "veomni", "data", "data_collator.py")
    try:
        st = os.stat(collator)
    except OSError:
        return {}
    return _read_table(collator, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=16)
def _read_table(path: str, _mtime: int, _size: int) -> dict[str, Entry]:
    parsed = load_file(path)  # the run's one parse of the file
    tree = parsed.tree if parsed is not None else None
    if tree is None:
        return {}
    for stmt in tree.body:
        target = stmt.target if isinstance(stmt, ast.AnnAssign) else None
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target = stmt.targets[0]
        value = getattr(stmt, "value", None)
        if (
            isinstance(target, ast.Name)
            and target.id == "DEFAULT_DATA_COLLATE_INFO"
            and isinstance(value, ast.Dict)
        ):
            return {k: e for k, e, _ in collate_entries(value)}
    return {}


def role_of(key: str, entry: Entry) -> str | None:
    """``mask`` (a per-token placeholder mask), ``payload`` (media features packed on dim 0 and padded),
    ``metadata`` (per-item sizes/grids, never padded), or None when the packing does not say."""
    pack_dim, _, pad_value, pad_scale = entry
    if key.endswith("_mask") and pack_dim == -1:
        return "mask"
    if pack_dim == 0 and pad_value is None and pad_scale is None:
        return "metadata"
    if pack_dim == 0 and isinstance(pad_value, (int, float)) and not isinstance(pad_value, bool):
        return "payload"
    return None
