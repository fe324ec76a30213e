"""NPU613 pair-result-as-tensor."""

from __future__ import annotations

import ast
import re

from npu_lint.core.astutil import own_nodes as _own_nodes  # memoised per file
from npu_lint.rules.base import Context, Example, Rule

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_TUPLE_METHODS = frozenset({"count", "index"})
# a top-level function returning a tuple display: ``    return a, b`` (the cheap text pre-check)
_TUPLE_RETURN = re.compile(r"^[ \t]+return [^\n#]*\w[\])]?, *[\w\[(]", re.M)


class PairResultAsTensor(Rule):
    code = "NPU613"
    name = "pair-result-as-tensor"
    summary = (
        "The result of a helper of the same file that always returns a tuple (`return tensors, sizes`) is used "
        "as one tensor: a tensor method or attribute, arithmetic, or a `torch.*` op on it."
    )
    why = (
        "Communication helpers come in pairs that differ in what they return: an all-gather into one buffer "
        "returns the gathered tensor, while a gather of uneven shards returns the per-rank tensors and their "
        "sizes (`return tensor_list, size_list`). Calling the pair-returning one where the tensor-returning one "
        "was meant (an autograd backward gathering its gradient, a sequence-parallel slice or pad) binds a "
        "tuple: `.split()`, `/ world_size` or `torch.cat(...)` on it raises the first time that path runs "
        "(often only in backward, only under sequence parallelism), or concatenates the wrong objects. "
        "Unpack the pair (`parts, sizes = helper(x)`) or call the helper that returns the tensor. A helper "
        "counts when every `return` in it returns a tuple display of two or more values; the result is followed "
        "through a name bound to it until the name is rebound."
    )
    bad = (
        Example(
            """
            import torch
            import torch.distributed as dist


            def _gather_uneven(x, group):
                world = dist.get_world_size(group)
                sizes = [torch.empty(1, dtype=torch.long, device=x.device) for _ in range(world)]
                dist.all_gather(sizes, torch.tensor([x.shape[0]], device=x.device), group=group)
                parts = [torch.empty(int(n), *x.shape[1:], dtype=x.dtype, device=x.device) for n in sizes]
                dist.all_gather(parts, x, group=group)
                return parts, sizes


            class _SliceRows(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x, group):
                    ctx.group, ctx.rows = group, x.shape[0]
                    return x.chunk(dist.get_world_size(group))[dist.get_rank(group)]

                @staticmethod
                def backward(ctx, grad):
                    full = _gather_uneven(grad, ctx.group)
                    full = full / dist.get_world_size(ctx.group)
                    return torch.cat(full.split(ctx.rows)), None
            """,
            path="veomni/distributed/sequence_parallel/toy_comm.py",
            title="a gradient gathered with the pair-returning helper",
        ),
        Example(
            """
            def pad_to_multiple(x, multiple):
                pad = -x.shape[1] % multiple
                return x.new_zeros(x.shape[0], pad).add_(0), pad


            def prepare(hidden_states, sp_size):
                return pad_to_multiple(hidden_states, sp_size).view(-1, sp_size)
            """,
            path="veomni/utils/toy_pad.py",
            title="a (tensor, amount) helper used directly as the tensor",
        ),
    )
    good = (
        Example(
            """
            import torch


            def _gather_uneven(x, group):
                parts = [x, x]
                return parts, [p.shape[0] for p in parts]


            def gather(x, group):
                parts, sizes = _gather_uneven(x, group)
                pair = _gather_uneven(x, group)
                first = pair[0]
                return torch.cat(parts), sizes, first, pair.count(None)
            """,
            path="veomni/distributed/toy_comm.py",
            title="unpacked, or indexed",
        ),
    )
    fix_safety = "No fix: whether to unpack the pair or call another helper is a judgement."
    requires = (lambda text: _TUPLE_RETURN.search(text) is not None,)
    node_types = (ast.Call,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self._pair_functions: dict[str, int] | None = None
        self._top: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}

    def _pair_size(self, name: str) -> int:
        """The tuple size every ``return`` of the module-level function ``name`` gives, or 0 (not such a
        function); computed on the first call of each name."""
        if self._pair_functions is None:
            self._pair_functions = {}
            self._top = {s.name: s for s in self.ctx.tree.body if isinstance(s, _FUNCS)}
        size = self._pair_functions.get(name)
        if size is not None:
            return size
        size = 0
        func = self._top.get(name)
        if func is not None:
            sizes = set()
            for sub in _own_nodes(func):
                if isinstance(sub, (ast.Yield, ast.YieldFrom)):
                    sizes.add(-1)
                elif isinstance(sub, ast.Return):
                    value = sub.value
                    if isinstance(value, ast.Tuple) and not any(
                        isinstance(e, ast.Starred) for e in value.elts
                    ):
                        sizes.add(len(value.elts))
                    else:
                        sizes.add(-1)
            if len(sizes) == 1 and min(sizes) >= 2:
                size = sizes.pop()
        self._pair_functions[name] = size
        return size

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Call)
        func = node.func
        if not isinstance(func, ast.Name):
            return
        size = self._pair_size(func.id)
        if not size:
            return
        use = self._tensor_use(node)
        if use is not None:
            self._report(node, func.id, size, use)
            return
        parent = self.ctx.parent
        if not (
            isinstance(parent, ast.Assign)
            and len(parent.targets) == 1
            and isinstance(parent.targets[0], ast.Name)
            and parent.value is node
        ):
            return
        name = parent.targets[0].id
        owner = self.ctx.function
        if owner is None:
            return
        for load in _loads_after(owner, name, parent):
            use = self._tensor_use(load, owner)
            if use is not None:
                self._report(node, func.id, size, use, name)
                return

    def _tensor_use(self, expr: ast.AST, scope: ast.AST | None = None) -> str | None:
        """How ``expr`` (a tuple) is used as a tensor: ``.split()``, ``/``, ``torch.cat(...)``; or None."""
        parent = self.ctx.parent if scope is None else _parent_in(scope, expr)
        if isinstance(parent, ast.Attribute) and parent.value is expr and parent.attr not in _TUPLE_METHODS:
            return f"`.{parent.attr}`"
        if isinstance(parent, ast.BinOp) and not isinstance(parent.op, (ast.Add, ast.Mult)):
            return "arithmetic"
        if isinstance(parent, ast.Call) and expr in parent.args:
            qual = self.ctx.qualname(parent.func) or ""
            if qual.startswith("torch.") and not qual.startswith("torch.distributed"):
                return f"`{qual}(...)`"
        return None

    def _report(self, call: ast.Call, helper: str, size: int, use: str, name: str | None = None) -> None:
        held = f"`{name}`, which holds it, is" if name else "it is"
        self.report(
            call,
            f"`{helper}()` returns a tuple of {size} on every path, but {held} used as one tensor ({use}): "
            f"unpack it (`a, b = {helper}(...)`) or call the helper that returns the tensor itself",
        )


def _parent_in(scope: ast.AST, target: ast.AST) -> ast.AST | None:
    for node in ast.walk(scope):
        for child in ast.iter_child_nodes(node):
            if child is target:
                return node
    return None


def _loads_after(func: ast.AST, name: str, stmt: ast.stmt) -> list[ast.Name]:
    """Loads of ``name`` after ``stmt`` up to its next rebinding, which takes effect at the end of the
    rebinding statement (``x = x / n`` still reads the old ``x``)."""
    end = (stmt.end_lineno or stmt.lineno, stmt.end_col_offset or 0)
    events: list[tuple[tuple[int, int], int, ast.Name | None]] = []
    for node in ast.walk(func):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load):
            pos = (node.lineno, node.col_offset)
            if pos > end:
                events.append((pos, 0, node))
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.AsyncFor)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node is not stmt and any(
                isinstance(t, ast.Name) and t.id == name for tg in targets for t in ast.walk(tg)
            ):
                pos = (node.end_lineno or node.lineno, node.end_col_offset or 0)
                if isinstance(node, (ast.For, ast.AsyncFor)):
                    pos = (node.target.lineno, node.target.col_offset)
                if pos > end:
                    events.append((pos, 1, None))
    events.sort(key=lambda e: (e[0], e[1]))
    out: list[ast.Name] = []
    for _pos, kind, node in events:
        if kind == 1:
            break
        assert node is not None
        out.append(node)
    return out
