"""NPU307 grouped-matmul-group-list-dtype."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import walk
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
        "through local assignments) is never cast to int64."
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
    )
    fix_safety = "No fix: cast the group list with `.to(torch.int64)` where it is built."
    requires = (("int32", ".int()"), _GROUPED)
    node_types = (ast.Call,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Call)
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
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
