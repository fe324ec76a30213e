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
import os
import re
from dataclasses import dataclass

from npu_lint.core.diagnostics import Edit
from npu_lint.veomni import patchgen

DEVICE_MODULE = "veomni.utils.device"
FLAG = "IS_NPU_AVAILABLE"
_GPU_MODULE = re.compile(r"^patched_modeling_\w+_gpu$")
_FLAG_IMPORT = re.compile(r"^from\s+(?P<module>[.\w]+)\s+import\s+[^\n]*\bIS_NPU_AVAILABLE\b", re.MULTILINE)


@dataclass
class StaticImport:
    node: ast.ImportFrom
    gpu_module: str  # e.g. "patched_modeling_gemma3_gpu"
    function: str | None  # the enclosing function (a registered one, usually)
    model_types: tuple[str, ...]  # what the enclosing function registers

    @property
    def npu_module(self) -> str:
        return self.gpu_module[: -len("_gpu")] + "_npu"


def generated_module(node: ast.ImportFrom) -> str | None:
    """``patched_modeling_<m>_gpu`` when the statement imports (from) that generated module."""
    module = node.module or ""
    last = module.rsplit(".", 1)[-1]
    parts = module.split(".")
    if _GPU_MODULE.match(last) and len(parts) >= 2 and parts[-2] == "generated":
        return last
    if last == "generated" or (node.level and module == "generated"):
        for alias in node.names:
            if _GPU_MODULE.match(alias.name):
                return alias.name
    return None


def _mentions_flag(test: ast.expr) -> bool:
    for node in ast.walk(test):
        if isinstance(node, ast.Name) and node.id == FLAG:
            return True
        if isinstance(node, ast.Attribute) and node.attr == FLAG:
            return True
    return False


def registered_types(func: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[str, ...]:
    out = []
    for deco in func.decorator_list:
        if (
            isinstance(deco, ast.Call)
            and isinstance(deco.func, ast.Attribute)
            and deco.func.attr == "register"
            and isinstance(deco.func.value, (ast.Name, ast.Attribute))
            and (deco.func.value.id if isinstance(deco.func.value, ast.Name) else deco.func.value.attr)
            == "MODELING_REGISTRY"
            and deco.args
            and isinstance(deco.args[0], ast.Constant)
            and isinstance(deco.args[0].value, str)
        ):
            out.append(deco.args[0].value)
    return tuple(out)


def find_static_imports(tree: ast.Module) -> list[StaticImport]:
    """Imports of a generated GPU module not chosen by an ``if IS_NPU_AVAILABLE`` (in either branch)."""
    out: list[StaticImport] = []

    def visit(body: list[ast.stmt], func: ast.FunctionDef | ast.AsyncFunctionDef | None) -> None:
        for stmt in body:
            if isinstance(stmt, ast.ImportFrom):
                gpu = generated_module(stmt)
                if gpu is not None:
                    name = func.name if func is not None else None
                    types = registered_types(func) if func is not None else ()
                    out.append(StaticImport(stmt, gpu, name, types))
            elif isinstance(stmt, ast.If):
                if _mentions_flag(stmt.test):
                    continue  # already chosen by device
                visit(stmt.body, func)
                visit(stmt.orelse, func)
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(stmt.body, stmt)
            elif isinstance(stmt, (ast.Try, ast.With, ast.For, ast.While)):
                for attr in ("body", "orelse", "finalbody"):
                    visit(getattr(stmt, attr, []), func)
                for handler in getattr(stmt, "handlers", []):
                    visit(handler.body, func)

    visit(tree.body, None)
    return out


def flag_bound(tree: ast.Module) -> bool:
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom) and any((a.asname or a.name) == FLAG for a in stmt.names):
            return True
    return False


def flag_import_module(init_path: str, tree: ast.Module) -> str:
    """Where to import ``IS_NPU_AVAILABLE`` from, following the tree's own style."""
    package_dir = os.path.dirname(os.path.abspath(init_path))
    parent = os.path.dirname(package_dir)
    try:
        siblings = sorted(os.listdir(parent))
    except OSError:
        siblings = []
    for name in siblings:
        other = os.path.join(parent, name, "__init__.py")
        if os.path.join(parent, name) == package_dir or not os.path.isfile(other):
            continue
        try:
            with open(other, encoding="utf-8") as fh:
                match = _FLAG_IMPORT.search(fh.read(8192))
        except (OSError, UnicodeDecodeError):
            continue
        if match:
            return match.group("module")
    relative = any(isinstance(s, ast.ImportFrom) and s.level for s in tree.body)
    module = patchgen.module_of(init_path)
    if relative and module is not None and module.startswith("veomni."):
        depth = len(module.split("."))  # a package's __init__: level 1 is the package itself
        return "." * depth + DEVICE_MODULE[len("veomni.") :]
    return DEVICE_MODULE


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
