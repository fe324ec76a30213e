"""NPU609 non-contiguous-collective-input."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import call_name
from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (faster)
from npu_lint.core.diagnostics import Edit
from npu_lint.rules.base import Context, Example, Rule, make_fix

# collective -> positions of the tensors (or tensor lists) it reads or writes in place
_TENSOR_ARGS: dict[str, tuple[tuple[int, str], ...]] = {
    "all_gather": ((1, "tensor"),),
    "all_gather_into_tensor": ((0, "output_tensor"), (1, "input_tensor")),
    "_all_gather_base": ((0, "output_tensor"), (1, "input_tensor")),
    "all_to_all": ((1, "input_tensor_list"),),
    "all_to_all_single": ((0, "output"), (1, "input")),
    "reduce_scatter": ((1, "input_list"),),
    "reduce_scatter_tensor": ((0, "output"), (1, "input")),
    "all_reduce": ((0, "tensor"),),
    "broadcast": ((0, "tensor"),),
    "reduce": ((0, "tensor"),),
    "send": ((0, "tensor"),),
    "isend": ((0, "tensor"),),
    "recv": ((0, "tensor"),),
    "irecv": ((0, "tensor"),),
}
_LAYOUT_VIEWS = {
    "transpose",
    "permute",
    "t",
    "swapaxes",
    "swapdims",
    "movedim",
    "moveaxis",
    "expand",
    "unfold",
}
_SPLITS = {"split", "chunk", "tensor_split", "unbind"}


def _literal_int(node: ast.AST | None) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _literal_int(node.operand)
        return None if inner is None else -inner
    return None


def _split_dim(call: ast.Call) -> int | None:
    """The literal dimension of ``x.split(n, dim)`` / ``x.chunk(k, dim=d)`` (0 when not given)."""
    func = call.func
    at = (
        2
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "torch"
        else 1
    )
    dim = (
        call.args[at]
        if len(call.args) > at
        else next((k.value for k in call.keywords if k.arg == "dim"), None)
    )
    if dim is None:
        return 0
    return _literal_int(dim)


def _view(node: ast.AST) -> str | None:
    """Why ``node`` is (in general) a non-contiguous view: a layout view (``transpose``, ``permute``, ``.T``),
    a slice of an inner dimension (``x[:, a:b]``), a narrow or a split piece along a non-leading dimension; None
    when it is contiguous or cannot be told (a ``.contiguous()`` / ``.clone()`` ends the question)."""
    if isinstance(node, ast.Attribute) and node.attr in ("T", "mT", "H", "mH"):
        return f"`.{node.attr}`"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        attr = node.func.attr
        if attr in _LAYOUT_VIEWS:
            return f"`.{attr}(...)`"
        if attr == "narrow":
            dim = _literal_int(node.args[0]) if node.args else None
            return "`.narrow(...)` of an inner dimension" if dim not in (None, 0) else None
        if attr in ("view", "reshape", "squeeze", "unsqueeze", "flatten", "float", "to", "type_as"):
            return None  # reshapes copy or keep what they are given: not judged
        return None
    if isinstance(node, ast.Subscript):
        value, index = node.value, node.slice
        if (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Attribute)
            and value.func.attr in _SPLITS
        ):
            dim = _split_dim(value)
            return (
                f"a piece of `.{value.func.attr}(...)` along dimension {dim}"
                if dim not in (None, 0)
                else None
            )
        if isinstance(index, ast.Tuple) and len(index.elts) >= 2:
            first = index.elts[0]
            full = (
                isinstance(first, ast.Slice)
                and first.lower is None
                and first.upper is None
                and first.step is None
            )
            if full and any(
                isinstance(e, ast.Slice) and not (e.lower is None and e.upper is None and e.step is None)
                for e in index.elts[1:]
            ):
                return "a slice of an inner dimension"
    return None


class NonContiguousCollectiveInput(Rule):
    code = "NPU609"
    name = "non-contiguous-collective-input"
    summary = (
        "A collective (`all_gather`, `all_to_all`, `reduce_scatter`, ...) is handed a view that is in general not "
        "contiguous (`transpose`/`permute`, a slice or split piece of an inner dimension) without `.contiguous()`."
    )
    why = (
        "Collectives work on a tensor's flat storage: HCCL (and NCCL) reject a non-contiguous tensor ('Tensors "
        "must be contiguous') or, through a backend that does not check, send the storage in memory order, "
        "which is not the view's order. Sequence and head parallelism produce such views all the time: a "
        "`transpose` to put the scattered dimension first, `x[:, start:end]`, the pieces of `x.split(n, dim=1)` "
        "handed to `all_to_all` as a list. Each must be made contiguous where it is handed over (`[t.contiguous() "
        "for t in x.split(n, dim=1)]`). The value is followed through the local name it was stored in."
    )
    bad = (
        Example(
            """
            import torch
            import torch.distributed as dist


            def exchange_heads(x, group, world):
                pieces = list(torch.tensor_split(x, world, dim=2))
                out = [torch.empty_like(p) for p in pieces]
                dist.all_to_all(out, pieces, group=group)
                return torch.cat(out, dim=1)


            def gather_seq(x, group, world):
                local = x.transpose(0, 1)
                parts = [torch.empty_like(local) for _ in range(world)]
                dist.all_gather(parts, local, group=group)
                return torch.cat(parts, dim=0)
            """,
            fixed="""
            import torch
            import torch.distributed as dist


            def exchange_heads(x, group, world):
                pieces = list(torch.tensor_split(x, world, dim=2))
                out = [torch.empty_like(p) for p in pieces]
                dist.all_to_all(out, pieces, group=group)
                return torch.cat(out, dim=1)


            def gather_seq(x, group, world):
                local = x.transpose(0, 1)
                parts = [torch.empty_like(local) for _ in range(world)]
                dist.all_gather(parts, local.contiguous(), group=group)
                return torch.cat(parts, dim=0)
            """,
            path="veomni/distributed/sequence_parallel/toy_comm.py",
        ),
    )
    good = (
        Example(
            """
            import torch
            import torch.distributed as dist


            def exchange_heads(x, group, world):
                pieces = [t.contiguous() for t in torch.tensor_split(x, world, dim=2)]
                out = [torch.empty_like(p) for p in pieces]
                dist.all_to_all(out, pieces, group=group)
                rows = list(x.split(4))  # along dimension 0: each piece is contiguous
                dist.all_to_all(out, rows, group=group)
                dist.all_reduce(x.transpose(0, 1).contiguous(), group=group)
                return torch.cat(out, dim=1)
            """,
            path="veomni/distributed/sequence_parallel/toy_comm.py",
        ),
    )
    fix_safety = (
        "Safe for a single tensor named or written at the call (`.contiguous()` is added there: a no-op when it "
        "already is); no fix for a list of pieces, or for a tensor the collective writes in place (`all_reduce`, "
        "`recv`, an output buffer), whose copy would receive the result instead of the original."
    )
    requires = (("all_gather", "all_to_all", "reduce_scatter", "all_reduce", "broadcast", "send", "recv"),)
    node_types = (ast.Call,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Call)
        func = node.func
        name = call_name(node)
        spots = _TENSOR_ARGS.get(name)
        if spots is None:
            return
        qual = self.ctx.qualname(func) or ""
        if not qual.startswith("torch.distributed"):
            return
        for index, keyword in spots:
            arg = node.args[index] if len(node.args) > index else None
            if arg is None:
                arg = next((k.value for k in node.keywords if k.arg == keyword), None)
            if arg is None:
                continue
            self._check(node, name, arg, keyword)

    def _binding(self, name: ast.Name, before: int) -> ast.AST | None:
        """The value of the last plain assignment of ``name`` before line ``before`` in the enclosing function;
        None when the name is also bound another way (a loop, ``+=``, ``with``, a walrus) or not at all."""
        func = self.ctx.function
        if func is None:
            return None
        found: ast.Assign | None = None
        for sub in _walk(func):
            if isinstance(sub, ast.Assign):
                if sub.lineno < before and any(
                    isinstance(t, ast.Name) and t.id == name.id for t in sub.targets
                ):
                    if found is None or sub.lineno > found.lineno:
                        found = sub
            elif isinstance(sub, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor, ast.NamedExpr)):
                if any(isinstance(t, ast.Name) and t.id == name.id for t in _walk(sub.target)):
                    return None
            elif isinstance(sub, ast.withitem) and sub.optional_vars is not None:
                if any(isinstance(t, ast.Name) and t.id == name.id for t in _walk(sub.optional_vars)):
                    return None
        return found.value if found is not None else None

    def _check(self, call: ast.Call, collective: str, arg: ast.AST, keyword: str) -> None:
        value: ast.AST | None = arg
        if isinstance(arg, ast.Name):
            value = self._binding(arg, call.lineno)
            if value is None:
                return
        listed = keyword.endswith("_list")
        if listed:
            # a list of pieces: ``list(x.split(n, dim=1))``, ``[*x.chunk(k, 2)]``, a list display
            pieces: list[ast.AST] = []
            if (
                isinstance(value, ast.Call)
                and getattr(value.func, "id", "") in ("list", "tuple")
                and value.args
            ):
                inner = value.args[0]
                if isinstance(inner, ast.Call):
                    pieces = [ast.Subscript(value=inner, slice=ast.Constant(0), ctx=ast.Load())]
            elif isinstance(value, (ast.List, ast.Tuple)):
                pieces = [e.value if isinstance(e, ast.Starred) else e for e in value.elts]
                pieces = [
                    ast.Subscript(value=p, slice=ast.Constant(0), ctx=ast.Load())
                    if isinstance(p, ast.Call)
                    else p
                    for p in pieces
                ]
            elif (
                isinstance(value, ast.Call)
                and isinstance(value.func, ast.Attribute)
                and value.func.attr in _SPLITS
            ):
                pieces = [ast.Subscript(value=value, slice=ast.Constant(0), ctx=ast.Load())]
            why = next((w for w in map(_view, pieces) if w is not None), None)
        else:
            why = _view(value) if value is not None else None
        if why is None:
            return
        shown = self.ctx.source.segment(arg)
        fix = None
        written = collective in ("all_reduce", "recv", "irecv", "broadcast", "reduce") or keyword.startswith(
            "output"
        )
        if not listed and not written:
            end = self.ctx.source.node_range(arg)[1]
            fix = make_fix(f"Pass `{shown}.contiguous()`", [Edit(end, end, ".contiguous()")])
        self.report(
            arg,
            f"`{collective}` is handed `{shown}`, {why}{' (its pieces)' if listed else ''}, which is in general not "
            "contiguous: HCCL rejects it (or a backend that does not check sends the storage in memory order); "
            "make it contiguous where it is handed over",
            fix,
        )
