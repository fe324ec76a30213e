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
        "or adds one (`q.unsqueeze(0)`) and returns the kernel's output without merging or removing it: the caller "
        "gets another shape than it passed."
    )
    why = (
        "A wrapper that replaces an eager function must return what the eager function returns. Ascend kernels "
        "such as `npu_rotary_mul` want per-head tensors, so the adapter splits the fused head axis first; the "
        "eager function it replaces (Wan's `rope_apply`: `... .flatten(2)`) returns the fused `[b, s, n*d]` "
        "layout. Returning the kernel's `[b, s, n, d]` output hands the attention a wrongly shaped query or key on "
        "Ascend only. The function's own input split is the reference: its output must be merged back. Likewise "
        "an adapter that adds an axis to a parameter for the kernel (`npu_rotary_mul` wants 4-D tensors, so the "
        "vision RoPE wrapper lifts `[s, h, d]` to `[1, s, h, d]`) must remove it before returning: a returned "
        "value that is the kernel's output through rank-keeping calls only (`transpose`, `contiguous`, `to`) "
        "hands the caller a tensor of another rank. Only the kernel's input counts (its first argument), not the "
        "cos/sin tables unsqueezed to broadcast; a squeeze, view, reshape, flatten or index on the way restores it."
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
        Example(
            """
            import torch_npu


            def apply_rope_vision_npu(q, cos, sin):
                q = q.unsqueeze(0)
                q_embed = torch_npu.npu_rotary_mul(q, cos, sin)
                return q_embed.transpose(1, 2)
            """,
            path="veomni/ops/kernels/toy_rope/npu.py",
            title="the axis added for the kernel moved, not removed",
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
        Example(
            """
            import torch_npu


            def apply_rope_vision_npu(q, cos, sin):
                q = q.unsqueeze(0)
                q_embed = torch_npu.npu_rotary_mul(q, cos, sin)
                return q_embed.squeeze(0)
            """,
            path="veomni/ops/kernels/toy_rope/npu.py",
        ),
    )
    fix_safety = (
        "No fix: merge the axes back (`.flatten(-2)`, the inverse `rearrange`) or squeeze the added one."
    )
    requires = ("torch_npu", ("rearrange", "unsqueeze", "[None"))
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
        if split_at is None:
            self._lifted_rank(node, params)
            return
        if _promises_split(node, _split_axes(split_pattern)):
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

    # -- an axis added for the kernel and not removed --------------------------------------------------------
    def _lifted_rank(self, node: ast.FunctionDef, params: set[str]) -> None:
        """``q = q.unsqueeze(0)`` on a parameter, ``npu_x(q, ...)``, and a returned value that is the kernel's
        output through rank-keeping calls only (``transpose``, ``contiguous``, ``to``): the caller passed a
        rank-n tensor and gets a rank-(n+1) one. Any squeeze, view, reshape, flatten or index on the way counts
        as restoring it; only the kernel's input (its first argument) counts, not the tables broadcast to it."""
        if "unsqueeze" not in self.ctx.source.text and "[None" not in self.ctx.source.text:
            return
        imported = self.ctx.memo.get("npucalls.imported")
        if imported is None:
            imported = self.ctx.memo["npucalls.imported"] = torch_npu_names(self.ctx.tree)
        bindings: dict[str, list[tuple[int, ast.expr]]] = {}
        for stmt in nodes_of(node, ast.Assign):
            assert isinstance(stmt, ast.Assign)
            if len(stmt.targets) != 1:
                continue
            target = stmt.targets[0]
            if isinstance(target, ast.Name):
                bindings.setdefault(target.id, []).append((stmt.lineno, stmt.value))
            elif (
                isinstance(target, ast.Tuple)
                and isinstance(stmt.value, ast.Tuple)
                and len(target.elts) == len(stmt.value.elts)
            ):
                for elt, value in zip(target.elts, stmt.value.elts):
                    if isinstance(elt, ast.Name):
                        bindings.setdefault(elt.id, []).append((stmt.lineno, value))
            elif isinstance(target, ast.Tuple):
                for elt in target.elts:  # bound to something this reader does not follow
                    if isinstance(elt, ast.Name):
                        bindings.setdefault(elt.id, []).append((stmt.lineno, ast.Constant(None)))

        def bound(name: str, line: int) -> tuple[int, ast.expr] | None:
            earlier = [(at, value) for at, value in bindings.get(name, ()) if at < line]
            return earlier[-1] if earlier else None

        def lifted(expr: ast.expr, line: int, depth: int = 0) -> tuple[str, int] | None:
            """(parameter, line) when ``expr`` is a parameter with one axis added (through elementwise calls)."""
            while (
                isinstance(expr, ast.Call)
                and call_name(expr) in _KEEPS_RANK
                and isinstance(expr.func, ast.Attribute)
            ):
                expr = expr.func.value
            if isinstance(expr, ast.Name) and depth < 8:
                hit = bound(expr.id, line)
                return lifted(hit[1], hit[0], depth + 1) if hit is not None else None
            if (
                isinstance(expr, ast.Call)
                and call_name(expr) == "unsqueeze"
                and isinstance(expr.func, ast.Attribute)
            ):
                param = parameter(expr.func.value, expr.lineno)
                return (param, expr.lineno) if param is not None else None
            if isinstance(expr, ast.Subscript) and _adds_one_axis(expr.slice):
                param = parameter(expr.value, expr.lineno)
                return (param, expr.lineno) if param is not None else None
            return None

        def parameter(expr: ast.expr, line: int, depth: int = 0) -> str | None:
            """The parameter ``expr`` is, through rank-keeping calls and rebindings (``q = q.float()``)."""
            while (
                isinstance(expr, ast.Call)
                and call_name(expr) in _KEEPS_RANK
                and isinstance(expr.func, ast.Attribute)
            ):
                expr = expr.func.value
            if not isinstance(expr, ast.Name) or depth >= 8:
                return None
            hit = bound(expr.id, line)
            if hit is None:
                return expr.id if expr.id in params else None
            return parameter(hit[1], hit[0], depth + 1)

        def kernel_output(expr: ast.expr, line: int, depth: int = 0) -> tuple[str, str, int] | None:
            """(kernel, parameter, line) when ``expr`` is a kernel's output on a lifted parameter through
            rank-keeping calls only."""
            while (
                isinstance(expr, ast.Call)
                and call_name(expr) in _KEEPS_RANK
                and isinstance(expr.func, ast.Attribute)
            ):
                expr = expr.func.value
            if isinstance(expr, ast.Name) and depth < 8:
                hit = bound(expr.id, line)
                return kernel_output(hit[1], hit[0], depth + 1) if hit is not None else None
            if isinstance(expr, ast.Call) and expr.args and not isinstance(expr.args[0], ast.Starred):
                kernel = kernel_of(expr, imported)  # type: ignore[arg-type]
                found = lifted(expr.args[0], expr.lineno) if kernel is not None else None
                if found is not None:
                    return kernel, found[0], found[1]  # type: ignore[return-value]
            return None

        returns = [r for r in nodes_of(node, ast.Return) if isinstance(r, ast.Return) and r.value is not None]
        if len(returns) != 1:
            return
        ret = returns[0]
        assert ret.value is not None
        values = ret.value.elts if isinstance(ret.value, ast.Tuple) else [ret.value]
        for value in values:
            found = kernel_output(value, ret.lineno)
            if found is None:
                continue
            kernel, param, at = found
            self.report(
                ret,
                f"`{node.name}` adds an axis to its parameter `{param}` for `{kernel}` (line {at}) and returns the "
                f"kernel's output (`{ast.unparse(value)}`) without removing it: the caller passed `{param}` with "
                "one axis fewer and gets the lifted shape back; squeeze the added axis (`.squeeze(0)`) before "
                "returning",
            )
            return


def _adds_one_axis(index: ast.expr) -> bool:
    """``x[None]``, ``x[None, ...]``, ``x[:, None]``: an index that adds exactly one axis and takes none away."""
    elts = index.elts if isinstance(index, ast.Tuple) else [index]
    nones = sum(1 for e in elts if isinstance(e, ast.Constant) and e.value is None)
    rest = all(
        (isinstance(e, ast.Constant) and e.value in (None, Ellipsis))
        or (isinstance(e, ast.Slice) and e.lower is None and e.upper is None and e.step is None)
        for e in elts
    )
    return nones == 1 and rest


# calls that keep a tensor's rank (a transpose moves the added axis, it does not remove it)
_KEEPS_RANK = frozenset(
    {
        "transpose",
        "permute",
        "contiguous",
        "to",
        "float",
        "half",
        "bfloat16",
        "type_as",
        "clone",
        "detach",
        "swapaxes",
        "movedim",
        "mul",
        "add",
        "neg",
    }
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
