"""NPU716 scatter-mask-mismatch."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import nodes_of
from npu_lint.core.astutil import walk as _walk
from npu_lint.rules.base import Example, Rule
from npu_lint.rules.multimodal._modality import root_name

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


def self_imports(value: ast.AST) -> set[str]:
    """Names that are modules or functions, not masks: the callee roots of calls in ``value`` (`F.pad`)."""
    out: set[str] = set()
    for n in _walk(value):
        if isinstance(n, ast.Call):
            func = n.func
            while isinstance(func, ast.Attribute):
                func = func.value
            if isinstance(func, ast.Name) and func is not None and not isinstance(n.func, ast.Name):
                if func.id[:1].isupper() or func.id in ("torch", "F", "np"):
                    out.add(func.id)
    return out


def _count_mask(value: ast.AST) -> str | None:
    """`rows[: mask.sum()]` -> `mask`: the mask whose count a slice keeps (also under a method chain,
    `rows[: mask.sum()].to(dtype)`)."""
    while isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
        value = value.func.value
    if not isinstance(value, ast.Subscript):
        return None
    index = value.slice
    parts = index.elts if isinstance(index, ast.Tuple) else [index]
    for part in parts:
        if isinstance(part, ast.Slice) and part.upper is not None and part.lower is None:
            upper = part.upper
            if (
                isinstance(upper, ast.Call)
                and isinstance(upper.func, ast.Attribute)
                and upper.func.attr in ("sum", "count_nonzero")
            ):
                root = root_name(upper.func.value)
                if root is not None:
                    return root.id
    return None


class ScatterMaskMismatch(Rule):
    code = "NPU716"
    name = "scatter-mask-mismatch"
    summary = (
        "Media rows cut to the count of one mask (`rows[: mask_a.sum()]`) are scattered at the positions of "
        "another (`embeds.masked_scatter(mask_b, rows)`)."
    )
    why = (
        "A wrapper that fills several kinds of media placeholders (understanding images and generated images, "
        "input and output images, image and video) gathers each kind's rows, keeps as many as its mask has "
        "positions, and scatters them at that mask. When the scatter takes another kind's mask the rows land "
        "on the other placeholders: `masked_scatter` runs short (or silently leaves rows unused) and the "
        "placeholders of the first kind keep their text embedding, so training learns from the wrong "
        "sequence without an error. The check follows, in one function, the rows a slice cut to a mask's "
        "count and the local mask a scatter uses back to the mask it was built from."
    )
    bad = (
        Example(
            """
            def fill(self, embeds, src_mask, gen_mask, src_rows, gen_rows):
                src_rows = src_rows[: src_mask.sum()]
                where = gen_mask.unsqueeze(-1).expand_as(embeds)
                embeds = embeds.masked_scatter(where, src_rows)
                gen_rows = gen_rows[: gen_mask.sum()]
                where = gen_mask.unsqueeze(-1).expand_as(embeds)
                return embeds.masked_scatter(where, gen_rows)
            """,
            path="veomni/models/transformers/toy_unified/modeling_toy_unified.py",
            title="the understanding rows placed at the generation mask",
        ),
    )
    good = (
        Example(
            """
            def fill(self, embeds, src_mask, gen_mask, src_rows, gen_rows):
                src_rows = src_rows[: src_mask.sum()]
                where = src_mask.unsqueeze(-1).expand_as(embeds)
                embeds = embeds.masked_scatter(where, src_rows)
                gen_rows = gen_rows[: gen_mask.sum()]
                where = gen_mask.unsqueeze(-1).expand_as(embeds)
                return embeds.masked_scatter(where, gen_rows)
            """,
            path="veomni/models/transformers/toy_unified/modeling_toy_unified.py",
            title="each kind's rows at its own mask",
        ),
    )
    fix_safety = "No fix: which mask is meant is the author's call."
    requires = ("masked_scatter", ".sum()")
    node_types = _FUNCS

    def visit(self, node: ast.AST) -> None:
        binds: list[tuple[int, str, ast.AST]] = []
        scatters: list[ast.Call] = []
        for n in nodes_of(node, ast.Assign, ast.Call):
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
                binds.append((n.end_lineno or n.lineno, n.targets[0].id, n.value))
            elif (
                isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and n.func.attr in ("masked_scatter", "masked_scatter_")
                and len(n.args) == 2
            ):
                scatters.append(n)
        if not scatters or not binds:
            return
        binds.sort(key=lambda b: b[0])
        for call in scatters:
            rows = root_name(call.args[1])
            where = root_name(call.args[0])
            if rows is None or where is None:
                continue
            counted = self._counted(binds, rows.id, call.lineno)
            if counted is None:
                continue
            placed = self._mask_root(binds, where.id, call.lineno)
            if placed is not None and placed != counted:
                self.report(
                    call.args[0],
                    f"`{rows.id}` is cut to the count of `{counted}` but scattered at the positions of `{placed}`: "
                    f"its rows land on `{placed}`'s placeholders and `{counted}`'s keep their text embedding "
                    "(scatter at the mask the rows were counted for)",
                )

    @staticmethod
    def _counted(binds: list[tuple[int, str, ast.AST]], name: str, line: int) -> str | None:
        """The mask whose count the latest binding of ``name`` before ``line`` (or one it derives from) keeps."""
        found: str | None = None
        for at, target, value in binds:
            if at >= line:
                break
            if target != name:
                continue
            mask = _count_mask(value)
            if mask is not None:
                found = mask
            else:
                root = root_name(value)
                if root is None or root.id != name:
                    found = None  # rebuilt from something else
        return found

    @staticmethod
    def _mask_root(binds: list[tuple[int, str, ast.AST]], name: str, line: int) -> str | None:
        """The mask a local mask is built from (`where = gen_mask.unsqueeze(-1)...`), or the name itself."""
        current, seen = name, set()
        while current not in seen:
            seen.add(current)
            value = None
            for at, target, v in binds:
                if at >= line:
                    break
                if target == current:
                    value = v
            if value is None:
                return current
            if any(isinstance(n, ast.Name) and n.id == current for n in _walk(value)):
                return current  # `mask = F.pad(mask[..., 1:], ...)`: the same mask, reshaped
            root = root_name(value)
            if root is None or root.id in self_imports(value):
                return current
            current = root.id
        return current
