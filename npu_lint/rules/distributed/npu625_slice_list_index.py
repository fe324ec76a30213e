"""NPU625 slice-list-index."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import nodes_of
from npu_lint.core.diagnostics import Applicability
from npu_lint.rules.base import Example, Rule, make_fix


def _is_slice_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "slice"


def _holds_slices(node: ast.AST) -> bool:
    """The list's own elements are ``slice(...)`` objects (not slices inside subscripts of its items)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return _holds_slices(node.left) or _holds_slices(node.right)
    if isinstance(node, (ast.List, ast.Tuple)):
        return any(_is_slice_call(e) for e in node.elts)
    if isinstance(node, (ast.ListComp, ast.GeneratorExp)):
        return _is_slice_call(node.elt)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "list":
        return len(node.args) == 1 and _holds_slices(node.args[0])
    return False


def _list_value(node: ast.AST) -> bool:
    """``[slice(None)] * x.dim()``, ``[slice(None), ...]``, ``list(...)``: a Python list."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return isinstance(node.left, ast.List) or isinstance(node.right, ast.List)
    if isinstance(node, (ast.List, ast.ListComp)):
        return True
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "list"


class SliceListIndex(Rule):
    code = "NPU625"
    name = "slice-list-index"
    summary = (
        "A tensor is indexed with a Python list of per-dimension slices (`x[slc]`, `slc = [slice(None)] * "
        "x.dim()`) instead of a tuple of them."
    )
    why = (
        "Sequence-parallel helpers cut each rank's share along one dimension by building one `slice` per "
        "dimension in a list (`slc[dim] = slice(start, end)`). Indexing with the list itself is the legacy "
        "non-tuple multidimensional index: NumPy dropped it, PyTorch warns since 2.x and, per that deprecation, "
        "reads a list as an advanced (gather) index once the compatibility path is removed: the shard is no "
        "longer this rank's chunk along `dim` (or the index raises). What the list holds is one slice per "
        "dimension, which a tuple says unambiguously: `x[tuple(slc)]`, as VeOmni's own `slice_input_tensor` "
        "does since its fix. A list is recognised when the function builds it (a list literal, `[...] * n`, "
        "`list(...)`) and it holds or is given `slice` objects."
    )
    bad = (
        Example(
            """
            def slice_input_tensor(x, dim, sp_size, sp_rank):
                unit = x.size(dim) // sp_size
                slc = [slice(None)] * len(x.shape)
                slc[dim] = slice(unit * sp_rank, unit * (sp_rank + 1))
                return x[slc].clone()
            """,
            fixed="""
            def slice_input_tensor(x, dim, sp_size, sp_rank):
                unit = x.size(dim) // sp_size
                slc = [slice(None)] * len(x.shape)
                slc[dim] = slice(unit * sp_rank, unit * (sp_rank + 1))
                return x[tuple(slc)].clone()
            """,
            path="veomni/distributed/sequence_parallel/data.py",
            title="the rank's share taken with a list of slices",
        ),
    )
    good = (
        Example(
            """
            def take(x, rows):
                idx = [0, 2, 3]
                return x[idx], x[tuple([slice(None), slice(0, 2)])], rows[list(range(3))]
            """,
            path="veomni/distributed/sequence_parallel/data.py",
        ),
    )
    fix_safety = "Safe: `x[tuple(slc)]` is what the list index meant on every PyTorch that accepted it."

    requires = ("slice(",)
    node_types = (ast.Subscript,)

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Subscript)
        index = node.slice
        if not isinstance(index, ast.Name) or not isinstance(node.ctx, ast.Load):
            return
        func = self.ctx.function
        if func is None or isinstance(func, ast.Lambda):
            return
        if not self._slice_list(func, index.id):
            return
        fix = make_fix(
            f"Index with `tuple({index.id})`",
            [self.ctx.replace(index, f"tuple({index.id})")],
            Applicability.SAFE,
        )
        self.report(
            node,
            f"`{index.id}` is a list of per-dimension slices used as the index: a list index is the deprecated "
            "non-tuple form that PyTorch reads as an advanced (gather) index once the compatibility path is "
            f"gone; index with `tuple({index.id})`",
            fix,
        )

    def _slice_list(self, func: ast.AST, name: str) -> bool:
        key = ("npu625-slice-lists", id(func))
        found = self.ctx.memo.get(key)
        if found is None or found[0] is not func:  # type: ignore[index]
            built: dict[str, bool] = {}  # name -> every binding is a list (True) / one is not (False)
            sliced: set[str] = set()
            for n in nodes_of(func, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For):
                if isinstance(n, ast.Assign):
                    for t in n.targets:
                        if isinstance(t, ast.Name):
                            ok = _list_value(n.value)
                            built[t.id] = built.get(t.id, True) and ok
                            if ok and _holds_slices(n.value):
                                sliced.add(t.id)
                        elif (
                            isinstance(t, ast.Subscript)
                            and isinstance(t.value, ast.Name)
                            and _is_slice_call(n.value)
                        ):
                            sliced.add(t.value.id)
                elif isinstance(n, (ast.AugAssign, ast.AnnAssign, ast.For)) and isinstance(
                    n.target, ast.Name
                ):
                    built[n.target.id] = False
            names = frozenset(k for k, v in built.items() if v and k in sliced)
            found = (func, names)
            self.ctx.memo[key] = found
        return name in found[1]  # type: ignore[index]
