"""NPU313 kernel-return-unlike-annotation."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import last_name, nodes_of
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.npucalls import kernel_of, torch_npu_names


def _tuple_elements(annotation: ast.expr | None) -> list[ast.expr] | None:
    """The elements of a fixed-length ``tuple[A, B]`` / ``Tuple[A, B]`` annotation, else None."""
    if not isinstance(annotation, ast.Subscript):
        return None
    base = annotation.value
    name = last_name(base) or ""
    if name not in ("tuple", "Tuple"):
        return None
    inner = annotation.slice
    elts = inner.elts if isinstance(inner, ast.Tuple) else [inner]
    if any(isinstance(e, ast.Constant) and e.value is Ellipsis for e in elts):
        return None
    return list(elts)


class KernelReturnUnlikeAnnotation(Rule):
    code = "NPU313"
    name = "kernel-return-unlike-annotation"
    summary = (
        "A function that runs an Ascend kernel returns a tuple shaped otherwise than its own return annotation "
        "(another length, or a kernel output where the annotation nests a tuple): the registry or caller that "
        "unpacks it by the declared contract gets the wrong values."
    )
    why = (
        "A kernel adapter's return annotation is the contract it shares with its eager sibling and the registry "
        "that calls it: `forward(...) -> tuple[tuple[Tensor, Tensor], SavedState]` returns the outputs and the "
        "state the backward reads. An NPU branch that returns `q_embed, k_embed` has the right length and the "
        "wrong shape: the registry takes `q_embed` as the outputs and `k_embed` as the saved state, and the "
        "backward fails (or rotates with a tensor where it expected cos/sin) on Ascend only, since the GPU runs "
        "the other adapter. The rule compares each tuple the function returns with the annotation: its length, "
        "and a nested tuple position given a kernel's output."
    )
    bad = (
        Example(
            """
            import torch_npu
            from torch import Tensor


            def forward(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[tuple[Tensor, Tensor], SavedState]:
                q_embed = torch_npu.npu_rotary_mul(q, cos, sin)
                k_embed = torch_npu.npu_rotary_mul(k, cos, sin)
                return q_embed, k_embed
            """,
            path="veomni/ops/kernels/toy_rope/npu.py",
            title="the outputs returned where the annotation promises (outputs, state)",
        ),
    )
    good = (
        Example(
            """
            import torch_npu
            from torch import Tensor


            def forward(q: Tensor, k: Tensor, cos: Tensor, sin: Tensor) -> tuple[tuple[Tensor, Tensor], SavedState]:
                q_embed = torch_npu.npu_rotary_mul(q, cos, sin)
                k_embed = torch_npu.npu_rotary_mul(k, cos, sin)
                return (q_embed, k_embed), SavedState((cos, sin))
            """,
            path="veomni/ops/kernels/toy_rope/npu.py",
        ),
    )
    fix_safety = "No fix: return what the annotation (and the eager sibling) returns."
    requires = ("torch_npu", "tuple")
    node_types = (ast.FunctionDef, ast.AsyncFunctionDef)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        declared = _tuple_elements(node.returns)
        if declared is None:
            return
        imported = self.ctx.memo.get("npucalls.imported")
        if imported is None:
            imported = self.ctx.memo["npucalls.imported"] = torch_npu_names(self.ctx.tree)
        own = [n for n in nodes_of(node, ast.Call) if kernel_of(n, imported) is not None]  # type: ignore[arg-type]
        if not own:
            return
        kernel_outputs: set[str] = set()
        for assign in nodes_of(node, ast.Assign):
            assert isinstance(assign, ast.Assign)
            if any(kernel_of(c, imported) is not None for c in nodes_of(assign.value, ast.Call)):  # type: ignore[arg-type]
                kernel_outputs.update(t.id for t in assign.targets if isinstance(t, ast.Name))
        shown = ast.unparse(node.returns) if node.returns is not None else ""
        for ret in nodes_of(node, ast.Return):
            assert isinstance(ret, ast.Return)
            if not isinstance(ret.value, ast.Tuple) or self._nested(ret, node):
                continue
            elts = ret.value.elts
            if any(isinstance(e, ast.Starred) for e in elts):
                continue
            if len(elts) != len(declared):
                self.report(
                    ret,
                    f"`{node.name}` returns {len(elts)} values here but is annotated `-> {shown}` "
                    f"({len(declared)}): the caller unpacking the declared contract gets the wrong values on the "
                    "path that runs the Ascend kernel",
                )
                return
            for i, (got, want) in enumerate(zip(elts, declared, strict=True)):
                if (
                    _tuple_elements(want) is not None
                    and isinstance(got, ast.Name)
                    and got.id in kernel_outputs
                ):
                    self.report(
                        ret,
                        f"`{node.name}` returns the kernel output `{got.id}` at position {i} where its annotation "
                        f"`-> {shown}` declares `{ast.unparse(want)}`: the caller unpacks the wrong values (the "
                        "outputs and the state the backward reads are mixed up); return the declared structure",
                    )
                    return

    @staticmethod
    def _nested(ret: ast.Return, func: ast.AST) -> bool:
        """Whether the return belongs to a function nested in ``func``."""
        for inner in nodes_of(func, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda):
            if inner is not func and any(r is ret for r in nodes_of(inner, ast.Return)):
                return True
        return False
