"""NPU307 grouped-matmul-group-list-dtype."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import call_name, walk
from npu_lint.rules.base import Context, Example, Rule

_GROUPED = ("grouped_matmul", "group_gemm", "grouped_gemm")
_GROUP_PARAMS = ("group_list", "grouplist", "group_sizes", "tokens_per_expert")


def _dtype_of_cast(node: ast.AST) -> str | None:
    """``x.to(torch.int32)`` / ``x.int()`` / ``x.to(dtype=torch.int64)`` / ``x.long()`` /
    ``torch.tensor(..., dtype=torch.int64)``: the integer width the expression casts to (``int32`` / ``int64``)."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr in ("int", "long") and not node.args:
        return "int32" if func.attr == "int" else "int64"
    values = [*node.args, *(kw.value for kw in node.keywords if kw.arg in ("dtype", None))]
    for value in values:
        if isinstance(value, ast.Attribute) and value.attr in ("int32", "int64", "long", "int"):
            return {"int": "int32", "long": "int64"}.get(value.attr, value.attr)
    return None


# calls that keep their input's integer dtype (the receiver's) and those that promote an integer input to int64
_KEEPS_DTYPE = frozenset(
    {
        "view", "reshape", "contiguous", "clone", "detach", "flatten", "squeeze", "unsqueeze", "transpose", "t",
        "narrow", "repeat", "expand", "cpu", "cuda", "npu", "to", "index_select", "roll", "flip", "split_with_sizes",
    }
)  # fmt: skip
_PROMOTES = frozenset({"sum", "cumsum", "cumprod", "prod", "bincount"})
_DTYPE_FACTORIES = frozenset({"zeros", "empty", "ones", "full", "zeros_like", "empty_like", "ones_like"})


def _casts(node: ast.AST) -> set[str]:
    return {d for sub in walk(node) for d in [_dtype_of_cast(sub)] if d is not None}


class GroupedMatmulGroupListDtype(Rule):
    code = "NPU307"
    name = "grouped-matmul-group-list-dtype"
    summary = (
        "A function narrows its routing tensors to int32 and hands the NPU grouped matmul a group list derived "
        "from them without casting it to int64."
    )
    why = (
        "`torch_npu.npu_grouped_matmul` (and the tree's wrappers around it, e.g. a `npu_group_gemm(x, weight, "
        "group_list)` autograd function) accepts only an int64 `group_list`: an int32 one fails with EZ1001 at "
        "the first MoE layer. Ascend's token permute and dispatch kernels want int32 indices, so NPU MoE code "
        "casts `selected_experts` to int32 first; every per-expert count computed from the cast tensor then "
        "carries int32 too, and the NPU paths of the tree cast the counts back (`.to(torch.int64)`) before the "
        "grouped matmul. The rule reports a grouped-matmul call of such a function whose group list (followed "
        "through local assignments) is never cast to int64, and a group list whose data flow (local assignments, "
        "tuples returned by the module's own functions, dtype-keeping calls such as `view` or indexing) ends at "
        "an int32 cast; an integer `sum` / `cumsum` / `bincount` gives int64 and ends the search."
    )
    bad = (
        Example(
            """
            import torch

            from veomni.ops.kernels.moe.npu_group_gemm import npu_group_gemm


            def expert_forward(hidden, selected_experts, weight, dispatcher):
                selected_experts = selected_experts.int()
                counts = dispatcher.count_tokens(selected_experts)
                group_list = counts
                return npu_group_gemm(hidden, weight, group_list)
            """,
            path="veomni/lora/ops/toy_group_gemm.py",
            title="the counts come from int32 routing indices and reach the grouped matmul uncast",
        ),
        Example(
            """
            import torch

            from veomni.ops.kernels.moe.npu_group_gemm import npu_group_gemm


            def count_tokens(selected_experts, num_experts):
                counts = torch.bincount(selected_experts.view(-1), minlength=num_experts).to(torch.int32)
                return counts.tolist(), counts[:num_experts].contiguous()


            def expert_forward(hidden, selected_experts, weight, num_experts):
                splits, tokens_per_expert = count_tokens(selected_experts, num_experts)
                return npu_group_gemm(hidden, weight, tokens_per_expert)
            """,
            path="veomni/lora/ops/toy_group_gemm.py",
            title="the group list is an int32 tensor returned by a helper of the module",
        ),
    )
    good = (
        Example(
            """
            import torch
            import torch_npu


            def expert_forward(hidden, selected_experts, weight, dispatcher):
                selected_experts = selected_experts.to(torch.int32)
                counts = dispatcher.count_tokens(selected_experts).to(torch.int64)
                return torch_npu.npu_grouped_matmul([hidden], [weight], group_list=counts, group_type=0)


            def base_forward(hidden, selected_experts, weight, dispatcher):
                counts = dispatcher.count_tokens(selected_experts)
                return torch_npu.npu_grouped_matmul([hidden], [weight], group_list=counts, group_type=0)
            """,
            path="veomni/lora/ops/toy_group_gemm.py",
        ),
        Example(
            """
            import torch

            from veomni.ops.kernels.moe.npu_group_gemm import npu_group_gemm


            def count_tokens(selected_experts, num_experts):
                counts = torch.bincount(selected_experts.view(-1), minlength=num_experts).to(torch.int32)
                return counts.view(2, -1).sum(dim=0)


            def expert_forward(hidden, selected_experts, weight, num_experts):
                tokens_per_expert = count_tokens(selected_experts, num_experts)
                return npu_group_gemm(hidden, weight, tokens_per_expert)
            """,
            path="veomni/lora/ops/toy_group_gemm.py",
            title="an integer `sum` promotes the int32 counts to int64",
        ),
    )
    fix_safety = "No fix: cast the group list with `.to(torch.int64)` where it is built."
    requires = (("int32", ".int()"), _GROUPED)
    node_types = (ast.Call,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Call)
        name = call_name(node)
        if not any(word in name.lower() for word in _GROUPED):
            return
        function = self.ctx.function
        if function is None:
            return
        group = self._group_argument(node, name)
        if group is None:
            return
        narrowed = self._narrowed(function, node.lineno)
        if narrowed is None:
            self._flow(node, name, group, function)
            return
        if "int64" in self._traced_casts(function, group, node.lineno):
            return
        shown = self.ctx.source.segment(group)
        self.report(
            group,
            f"`{name}` gets the group list `{shown}` uncast, but `{function.name}` narrowed `{narrowed[0]}` to "
            f"int32 (line {narrowed[1]}) before the counts were derived: the NPU grouped matmul accepts only an "
            "int64 group list (EZ1001 on the first MoE layer); cast it with `.to(torch.int64)`",
        )

    @staticmethod
    def _group_argument(call: ast.Call, name: str) -> ast.expr | None:
        for kw in call.keywords:
            if kw.arg and kw.arg.lower() in _GROUP_PARAMS:
                return kw.value
        if "grouped_matmul" in name.lower():
            return None  # torch_npu's API takes it by keyword only
        return call.args[2] if len(call.args) >= 3 else None  # the wrappers' (x, weight, group_list)

    @staticmethod
    def _narrowed(function: ast.AST, before: int) -> tuple[str, int] | None:
        """(name, line) of a ``name = <expr cast to int32>`` rebinding before line ``before``."""
        for stmt in walk(function):
            if (
                isinstance(stmt, ast.Assign)
                and stmt.lineno < before
                and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)
                and _dtype_of_cast(stmt.value) == "int32"
            ):
                return stmt.targets[0].id, stmt.lineno
        return None

    @staticmethod
    def _traced_casts(function: ast.AST, value: ast.expr, before: int, depth: int = 0) -> set[str]:
        """The integer casts applied to ``value`` or, through local assignments, to what it was built from."""
        found = _casts(value)
        if depth >= 4:
            return found
        for sub in walk(value):
            if not isinstance(sub, ast.Name):
                continue
            for stmt in walk(function):
                if (
                    isinstance(stmt, ast.Assign)
                    and stmt.lineno < before
                    and any(isinstance(t, ast.Name) and t.id == sub.id for t in stmt.targets)
                    and _dtype_of_cast(stmt.value) != "int32"
                ):
                    found |= GroupedMatmulGroupListDtype._traced_casts(
                        function, stmt.value, stmt.lineno, depth + 1
                    )
        return found

    def _flow(self, call: ast.Call, name: str, group: ast.expr, function: ast.AST) -> None:
        """The group list's integer dtype followed through its data flow: local assignments, tuple returns of the
        module's own functions, dtype-keeping calls (``view``, indexing, ``torch.zeros(..., dtype=x.dtype)``) and
        promoting ones (``sum`` / ``cumsum`` / ``bincount`` give int64). Reported when it ends at an int32 cast."""
        found = self._int_dtype(group, function, call.lineno, 0)
        if found is None or found[0] != "int32":
            return
        shown = self.ctx.source.segment(group)
        where = f"line {found[1]}" + (
            f" in `{found[2]}`" if found[2] != getattr(function, "name", "") else ""
        )
        self.report(
            group,
            f"`{name}` gets the group list `{shown}`, which is int32 (cast at {where}) with no int64 cast or "
            "promoting reduction on the way: the NPU grouped matmul accepts only an int64 group list (EZ1001 on "
            "the first MoE layer); cast it with `.to(torch.int64)`",
        )

    def _functions(self) -> dict[str, ast.FunctionDef]:
        cached = getattr(self, "_module_functions", None)
        if cached is None:
            cached = {stmt.name: stmt for stmt in self.ctx.tree.body if isinstance(stmt, ast.FunctionDef)}
            self._module_functions = cached
        return cached

    def _int_dtype(
        self, expr: ast.expr, function: ast.AST, before: int, depth: int
    ) -> tuple[str, int, str] | None:
        """(``int32`` / ``int64``, line, function name) of the integer dtype ``expr`` carries, or None."""
        if depth > 8:
            return None
        fname = getattr(function, "name", "")
        if isinstance(expr, ast.Subscript):
            return self._int_dtype(expr.value, function, before, depth + 1)
        if isinstance(expr, ast.Call):
            cast = _dtype_of_cast(expr)
            func = expr.func
            attr = call_name(expr)
            if cast is not None and attr not in _DTYPE_FACTORIES:
                return cast, expr.lineno, fname
            if attr in _PROMOTES:
                return "int64", expr.lineno, fname
            if attr in _DTYPE_FACTORIES:
                dtype = next((k.value for k in expr.keywords if k.arg == "dtype"), None)
                if cast is not None:
                    return cast, expr.lineno, fname
                if isinstance(dtype, ast.Attribute) and dtype.attr == "dtype":
                    return self._int_dtype(dtype.value, function, before, depth + 1)
                if attr.endswith("_like") and expr.args and dtype is None:
                    return self._int_dtype(expr.args[0], function, before, depth + 1)
                return None
            if isinstance(func, ast.Attribute) and attr in _KEEPS_DTYPE:
                return self._int_dtype(func.value, function, before, depth + 1)
            if isinstance(func, ast.Name) and func.id in self._functions():
                callee = self._functions()[func.id]
                returned = self._returned(callee, None)
                return returned and self._int_dtype(returned[0], callee, returned[1], depth + 1)
            return None
        if not isinstance(expr, ast.Name):
            return None
        last: tuple[int, ast.expr, int | None] | None = None  # (line, value, tuple index)
        for stmt in walk(function):
            if not isinstance(stmt, ast.Assign) or stmt.lineno >= before or len(stmt.targets) != 1:
                continue
            target = stmt.targets[0]
            if isinstance(target, ast.Name) and target.id == expr.id:
                entry = (stmt.lineno, stmt.value, None)
            elif isinstance(target, ast.Tuple):
                index = next(
                    (i for i, e in enumerate(target.elts) if isinstance(e, ast.Name) and e.id == expr.id),
                    None,
                )
                if index is None:
                    continue
                entry = (stmt.lineno, stmt.value, index)
            else:
                continue
            if last is None or entry[0] > last[0]:
                last = entry
        if last is None:
            return None
        line, value, index = last
        if index is None:
            return self._int_dtype(value, function, line, depth + 1)
        if isinstance(value, ast.Tuple) and index < len(value.elts):
            return self._int_dtype(value.elts[index], function, line, depth + 1)
        if (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Name)
            and value.func.id in self._functions()
        ):
            callee = self._functions()[value.func.id]
            returned = self._returned(callee, index)
            return returned and self._int_dtype(returned[0], callee, returned[1], depth + 1)
        return None

    @staticmethod
    def _returned(callee: ast.FunctionDef, index: int | None) -> tuple[ast.expr, int] | None:
        """The expression the callee's last ``return`` gives (element ``index`` of a returned tuple) and the
        line after which its names are looked up."""
        returns = [r for r in walk(callee) if isinstance(r, ast.Return) and r.value is not None]
        if not returns:
            return None
        ret = max(returns, key=lambda r: r.lineno)
        value = ret.value
        assert value is not None
        if index is not None:
            if not isinstance(value, ast.Tuple) or index >= len(value.elts):
                return None
            value = value.elts[index]
        return value, ret.lineno + 1
