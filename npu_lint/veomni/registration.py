"""Model registration in a package's ``__init__.py``: registered model types, static imports of generated
modules, and whether the NPU switch flag (``IS_NPU_AVAILABLE``) is bound."""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass

from npu_lint.core.safeio import MAX_SMALL_BYTES, read_text
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


def device_module_for(path: str, tree: ast.Module, device_module: str = DEVICE_MODULE) -> str:
    """How a module imports VeOmni's device helpers (``device_module``, the profile's), in its own style:
    relative (``....utils.device``) when it is inside the ``veomni`` package and imports its other veomni
    modules relatively, else absolute."""
    absolute = relative = False
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom):
            if stmt.level:
                relative = True
            elif (stmt.module or "").split(".")[0] == "veomni":
                absolute = True
        elif isinstance(stmt, ast.Import) and any(a.name.split(".")[0] == "veomni" for a in stmt.names):
            absolute = True
    module = patchgen.module_of(path)
    if relative and not absolute and module is not None and module.startswith("veomni."):
        parts = module.split(".")
        is_init = os.path.basename(path) == "__init__.py"
        depth = len(parts) if is_init else len(parts) - 1  # level 1 is the module's own package
        return "." * depth + device_module[len("veomni.") :]
    return device_module


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
            match = _FLAG_IMPORT.search(read_text(other, limit=MAX_SMALL_BYTES)[:8192])
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
