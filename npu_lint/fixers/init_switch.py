"""Make a model package's ``__init__.py`` choose its generated module by ``IS_NPU_AVAILABLE`` (NPU502).

Each import of a ``generated/patched_modeling_<m>_gpu`` module that no ``if IS_NPU_AVAILABLE:`` governs is
rewritten, where it stands (inside every registered function, or at module level), to::

    if IS_NPU_AVAILABLE:
        from .generated.patched_modeling_<m>_npu import A, B
    else:
        from .generated.patched_modeling_<m>_gpu import A, B

Nothing else in the function changes (the architecture-substring fallback logic stays as it is).
``IS_NPU_AVAILABLE`` is imported the way the tree already does it: like a sibling package's ``__init__.py``
(``from ....utils.device import IS_NPU_AVAILABLE`` in older trees), else relatively when the file imports
relatively, else from ``veomni.utils.device``.

The rewrite is a line-level edit computed from ``ast`` positions: the import statement keeps its own text
(names, parentheses, comments), re-indented one level, and the edits are small enough to combine with other
fixes in the same file. No libcst is needed, so a plain ``check`` stays free of it.
"""

from __future__ import annotations

import ast
import re

from npu_lint.core.diagnostics import Edit
from npu_lint.veomni.registration import StaticImport
from npu_lint.veomni.selection import FLAG


def _line_start(text: str, line_starts: list[int], line: int) -> int:
    return line_starts[line - 1] if line - 1 < len(line_starts) else len(text)


def _line_starts(text: str) -> list[int]:
    starts = [0]
    for i, ch in enumerate(text):
        if ch == "\n":
            starts.append(i + 1)
    return starts


def flag_import_edit(text: str, tree: ast.Module, module: str) -> Edit:
    """Insert ``from <module> import IS_NPU_AVAILABLE`` among the module's leading imports."""
    starts = _line_starts(text)
    level = len(module) - len(module.lstrip("."))
    header: list[ast.stmt] = []
    for i, stmt in enumerate(tree.body):
        if i == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            header.append(stmt)
            continue
        break
    line = f"from {module} import {FLAG}\n"
    for stmt in header:
        if level and isinstance(stmt, ast.ImportFrom) and 0 < stmt.level < level:
            offset = _line_start(text, starts, stmt.lineno)
            return Edit(offset, offset, line)
        if not level and isinstance(stmt, ast.ImportFrom) and stmt.level:
            offset = _line_start(text, starts, stmt.lineno)
            return Edit(offset, offset, line)
    if header:
        end = header[-1].end_lineno or header[-1].lineno
        if end < len(starts):
            offset = starts[end]
            return Edit(offset, offset, line)
        return Edit(len(text), len(text), "\n" + line.rstrip("\n"))
    first = tree.body[0] if tree.body else None
    if first is not None and isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
        end = first.end_lineno or first.lineno
        offset = starts[end] if end < len(starts) else len(text)
        return Edit(offset, offset, "\n" + line)
    return Edit(0, 0, line)


def switch_edit(text: str, item: StaticImport) -> Edit | None:
    """The ``if IS_NPU_AVAILABLE: ... else: ...`` replacement of one static import (None if it does not
    stand on lines of its own)."""
    node = item.node
    starts = _line_starts(text)
    first = _line_start(text, starts, node.lineno)
    end_line = node.end_lineno or node.lineno
    last_end = _line_start(text, starts, end_line + 1) if end_line < len(starts) else len(text)
    block = text[first:last_end]
    indent = block[: len(block) - len(block.lstrip(" \t"))]
    if len(indent) != node.col_offset:
        return None  # shares its line with other code (``if x: from ...``)
    if not block.endswith("\n"):
        block += "\n"
    statement = block[len(indent) :]
    code_end = statement.find(";")
    if code_end != -1 and "#" not in statement[:code_end]:
        return None  # ``from ... import A; other()``
    gpu_text = statement
    npu_text = _npu_statement(statement, item)
    if npu_text is None:
        return None
    step = "\t" if "\t" in indent else "    "
    inner = indent + step
    out = (
        f"{indent}if {FLAG}:\n"
        + _reindent(npu_text, inner, step)
        + f"{indent}else:\n"
        + _reindent(gpu_text, inner, step)
    )
    if not text[first:last_end].endswith("\n"):
        out = out.rstrip("\n")
    return Edit(first, last_end, out)


def _npu_statement(statement: str, item: StaticImport) -> str | None:
    gpu, npu = item.gpu_module, item.npu_module
    module = item.node.module or ""
    if module.rsplit(".", 1)[-1] == gpu:
        new, n = re.subn(rf"\b{re.escape(gpu)}\b", npu, statement, count=1)
        return new if n else None
    # ``from .generated import patched_modeling_<m>_gpu [as gen]``: keep the bound name
    alias = next((a for a in item.node.names if a.name == gpu), None)
    if alias is None:
        return None
    replacement = npu if alias.asname else f"{npu} as {gpu}"
    head, sep, tail = statement.partition(" import ")
    if not sep:
        return None
    tail, n = re.subn(rf"(?<![\w.]){re.escape(gpu)}(?!\w)", replacement, tail, count=1)
    return head + sep + tail if n else None


def _reindent(statement: str, indent: str, step: str = "    ") -> str:
    lines = statement.splitlines(keepends=True)
    out = [indent + lines[0]]
    for line in lines[1:]:
        out.append((step + line) if line.strip() else line)
    return "".join(out)
