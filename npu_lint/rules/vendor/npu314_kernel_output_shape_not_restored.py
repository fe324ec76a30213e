"""NPU314 kernel-output-shape-not-restored."""

from __future__ import annotations

import ast
import os
import re

from npu_lint.core.astutil import call_name, nodes_of, str_value
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.layout import adapter_bases, sibling_modules
from npu_lint.veomni.npucalls import kernel_of, torch_npu_names
from npu_lint.veomni.patchgen import load_file

# calls that merge or reshape axes back
_RESHAPES = frozenset(
    {"flatten", "reshape", "view", "rearrange", "unflatten", "view_as", "reshape_as", "squeeze"}
)
_GROUP = re.compile(r"\(([^()]+)\)")


def _splits(pattern: str) -> bool:
    """An einops pattern that splits a grouped input axis (``b s (n d) -> b s n d``)."""
    left, sep, right = pattern.partition("->")
    return bool(sep) and bool(_GROUP.search(left)) and not _GROUP.search(right)


def _split_axes(pattern: str) -> list[str]:
    """The axes a splitting pattern produces (``b s (n d) -> b s n d`` -> ``["b", "s", "n", "d"]``)."""
    return re.findall(r"\w+", pattern.partition("->")[2])


def _promises_split(node: ast.FunctionDef, axes: list[str]) -> bool:
    """The function's return annotation or docstring names the split layout as its output
    (``Float[Tensor, "b s n d"]``, ``per-head [b, s, n, d] ... out``): the caller asked for the per-head shape."""
    if not axes:
        return False
    shape = re.compile(r"(?<![\w*])" + r"[\s,]+".join(re.escape(a) for a in axes) + r"(?![\w*])")
    texts = [ast.unparse(node.returns)] if node.returns is not None else []
    doc = ast.get_docstring(node)
    if doc:
        texts.append(doc)
    return any(shape.search(text) for text in texts)


class KernelOutputShapeNotRestored(Rule):
    code = "NPU314"
    name = "kernel-output-shape-not-restored"
    summary = (
        'An Ascend adapter splits an axis of its input for the kernel (`rearrange(x, "b s (n d) -> b s n d")`) '
        "and returns the kernel's output without merging it back: the caller gets another shape than it passed."
    )
    why = (
        "A wrapper that replaces an eager function must return what the eager function returns. Ascend kernels "
        "such as `npu_rotary_mul` want per-head tensors, so the adapter splits the fused head axis first; the "
        "eager function it replaces (Wan's `rope_apply`: `... .flatten(2)`) returns the fused `[b, s, n*d]` "
        "layout. Returning the kernel's `[b, s, n, d]` output hands the attention a wrongly shaped query or key on "
        "Ascend only. The function's own input split is the reference: its output must be merged back."
    )
    bad = (
        Example(
            """
            import torch_npu
            from einops import rearrange


            def rope_apply_npu(x, cos, sin, head_dim):
                x = rearrange(x, "b s (n d) -> b s n d", d=head_dim)
                x_out = torch_npu.npu_rotary_mul(x, cos, sin)
                return x_out.to(x.dtype)
            """,
            path="veomni/models/transformers/toy/npu_patch.py",
            title="the per-head output returned where the fused layout came in",
        ),
    )
    good = (
        Example(
            """
            import torch_npu
            from einops import rearrange


            def rope_apply_npu(x, cos, sin, head_dim):
                x = rearrange(x, "b s (n d) -> b s n d", d=head_dim)
                x_out = torch_npu.npu_rotary_mul(x, cos, sin).flatten(-2)
                return x_out.to(x.dtype)
            """,
            path="veomni/models/transformers/toy/npu_patch.py",
        ),
    )
    fix_safety = "No fix: merge the axes back (`.flatten(-2)`, the inverse `rearrange`)."
    requires = ("torch_npu", "rearrange")
    node_types = (ast.FunctionDef,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.FunctionDef)
        params = {a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)}
        split_at, split_pattern = None, ""
        for call in nodes_of(node, ast.Call):
            assert isinstance(call, ast.Call)
            name = call.func.id if isinstance(call.func, ast.Name) else ""
            if name != "rearrange" or len(call.args) < 2:
                continue
            first, pattern = call.args[0], str_value(call.args[1])
            if (
                isinstance(first, ast.Name)
                and first.id in params
                and pattern is not None
                and _splits(pattern)
            ):
                split_at, split_pattern = call.lineno, pattern
        if split_at is None or _promises_split(node, _split_axes(split_pattern)):
            return
        imported = self.ctx.memo.get("npucalls.imported")
        if imported is None:
            imported = self.ctx.memo["npucalls.imported"] = torch_npu_names(self.ctx.tree)
        kernels = [c for c in nodes_of(node, ast.Call) if kernel_of(c, imported) is not None]  # type: ignore[arg-type]
        if not kernels:
            return
        line = min(c.lineno for c in kernels)
        if line < split_at:
            return
        for call in nodes_of(node, ast.Call):
            assert isinstance(call, ast.Call)
            name = call_name(call)
            if name in _RESHAPES and call.lineno >= line:
                return  # merged back after the kernel
        returns = [r for r in nodes_of(node, ast.Return) if isinstance(r, ast.Return) and r.value is not None]
        if len(returns) != 1 or returns[0].lineno < line:
            return
        eager = _eager_counterpart(self.ctx.source.path, node.name)
        if eager is not None and not eager[2]:
            return  # the eager function this replaces returns the split layout too
        like = f" as `{eager[1]}` in {eager[0]} does" if eager is not None else ""
        self.report(
            returns[0],
            f"`{node.name}` splits its input's fused axis for the Ascend kernel (line {split_at}) and returns the "
            "kernel's output unmerged: the caller (and the eager function this replaces) expects the layout it "
            f"passed in; merge the axes back (`.flatten(-2)` or the inverse `rearrange`){like}",
        )


_MERGES = frozenset({"flatten", "view_as", "reshape_as"})


def _merges(call: ast.Call) -> bool:
    """A call that merges axes (``flatten``, ``view_as``, a ``rearrange`` grouping on its right side); a
    ``reshape`` / ``view`` / ``unflatten`` may split as well and is not counted."""
    name = call_name(call)
    if name == "rearrange" and len(call.args) >= 2:
        pattern = str_value(call.args[1]) or ""
        return bool(_GROUP.search(pattern.partition("->")[2]))
    return name in _MERGES


def _eager_counterpart(path: str, name: str) -> tuple[str, str, bool] | None:
    """The eager function an Ascend adapter replaces: a function of a sibling module (same directory) named as the
    adapter without its ``_npu`` / ``_fused`` affix (``rope_apply_fused`` -> ``rope_apply``), with a split of its
    input like the adapter's. (file name, function name, whether it merges the axes back after the split), or
    None when there is none."""
    bases = adapter_bases(name)
    if not bases:
        return None
    for full in sibling_modules(path):
        file = os.path.basename(full)
        parsed = load_file(full)
        tree = parsed.tree if parsed is not None else None
        if tree is None:
            continue
        for func in tree.body:
            if not isinstance(func, ast.FunctionDef) or func.name not in bases:
                continue
            split = [
                c.lineno
                for c in nodes_of(func, ast.Call)
                if isinstance(c, ast.Call)
                and isinstance(c.func, ast.Name)
                and c.func.id == "rearrange"
                and len(c.args) >= 2
                and _splits(str_value(c.args[1]) or "")
            ]
            if not split:
                continue
            merges = any(
                isinstance(c, ast.Call) and c.lineno > split[0] and _merges(c)
                for c in nodes_of(func, ast.Call)
            )
            return file, func.name, merges
    return None
