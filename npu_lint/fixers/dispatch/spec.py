"""Reading a spec or model module with stdlib ``ast``: OpSlot declarations, spec decorators and registrations.

Small functions over the original text shared by the analysis, the vendor pre-pass and the sibling edits: which
slots a file declares (module level or in ``config.add_post_import_block``), what a ``@config.<method>(target)``
decorator targets, which functions a spec registers and imports, ``base_spec_import`` (the spec whose functions
this one reuses), the guard and offset-weight shapes the analysis recognises, the OpSlot-era text of specs this
process already migrated (``remember_original`` / ``base_original``), and text helpers for copied functions
(``rename_def``, ``indent_lines``).
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterable, Sequence

from npu_lint.core.astutil import dotted_name as _dotted
from npu_lint.fixers.dispatch.plan import CONFIG_SLOT, GUARD_ATTR, Slot


def const_str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def opslot_call(node: ast.AST) -> tuple[str, str] | None:
    if isinstance(node, ast.Call) and _dotted(node.func) in ("OpsConfigSlot", "dispatch.OpsConfigSlot"):
        field_name = const_str(node.args[0]) if node.args else None
        if field_name is None:
            field_name = next((const_str(k.value) for k in node.keywords if k.arg in ("field", "name")), None)
        return (CONFIG_SLOT, field_name) if field_name else None
    if not isinstance(node, ast.Call) or _dotted(node.func) not in ("OpSlot", "dispatch.OpSlot"):
        return None
    args = [const_str(a) for a in node.args[:2]]
    kw = {k.arg: const_str(k.value) for k in node.keywords}
    op = args[0] if args else kw.get("op") or kw.get("op_name")
    variant = args[1] if len(args) > 1 else kw.get("variant")
    if op is None or variant is None:
        return None
    return op, variant


def slots_in(body: Iterable[ast.stmt]) -> list[Slot]:
    out = []
    for stmt in body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            found = opslot_call(stmt.value)
            if found:
                out.append(Slot(stmt.targets[0].id, *found))
    return out


def post_import_block_text(stmt: ast.stmt, config_name: str) -> str | None:
    if (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Call)
        and _dotted(stmt.value.func) == f"{config_name}.add_post_import_block"
        and stmt.value.args
    ):
        return const_str(stmt.value.args[0])
    return None


def decorator_target(
    fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef, config_name: str
) -> tuple[str, str] | None:
    for dec in fn.decorator_list:
        call = dec if isinstance(dec, ast.Call) else None
        name = _dotted(call.func if call else dec)
        if not name or not name.startswith(config_name + "."):
            continue
        method = name.split(".", 1)[1]
        target = None
        if call is not None:
            target = const_str(call.args[0]) if call.args else None
            if target is None:
                for kw in call.keywords:
                    if kw.arg in (
                        "target",
                        "target_method",
                        "target_func",
                        "target_class",
                        "target_function",
                    ):
                        target = const_str(kw.value)
        return method, target or ""
    return None


def snake_case(name: str) -> str:
    s = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name)
    return s.lower()


def guard_slot(test: ast.expr, slots: dict[str, Slot]) -> tuple[Slot, bool] | None:
    negated = False
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, negated = test.operand, True
    if (
        isinstance(test, ast.Attribute)
        and test.attr == GUARD_ATTR
        and isinstance(test.value, ast.Name)
        and test.value.id in slots
    ):
        return slots[test.value.id], negated
    return None


def unsupported_case(stmt: ast.stmt) -> bool:
    """``if <condition>: raise ...`` (no else): the fused path refuses a case the eager path handles."""
    return (
        isinstance(stmt, ast.If)
        and not stmt.orelse
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], ast.Raise)
    )


def is_offset_weight(node: ast.expr) -> ast.expr | None:
    """``1 + w`` / ``1.0 + w`` / ``w + 1.0`` -> ``w``."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        for const, other in ((node.left, node.right), (node.right, node.left)):
            if (
                isinstance(const, ast.Constant)
                and const.value in (1, 1.0)
                and not isinstance(const.value, bool)
            ):
                return other
    return None


def walk_fn(fn: ast.AST) -> Iterable[ast.AST]:
    """Nodes of a function body (nested defs included: a slot used there is still this method's)."""
    return ast.walk(fn)


def rename_def(text: str, old: str, new: str) -> str:
    return re.sub(rf"\bdef {re.escape(old)}\(", f"def {new}(", text, count=1)


def indent_lines(lines: Sequence[str], indent: str) -> str:
    parts = [part for line in lines for part in line.rstrip("\n").split("\n")]
    return "".join(f"{indent}{part}\n" if part.strip() else "\n" for part in parts)


# ----------------------------------------------------------------------------------------------------
# entry points
# ----------------------------------------------------------------------------------------------------
# the OpSlot-era text of specs this process migrated, keyed by (real path, migrated text): a sibling or dependent
# migrated afterwards (``check --fix`` writes the GPU spec before its NPU sibling) still learns what the base
# spec's migration did (its kernel attributes, its retired imports)
_ORIGINALS: dict[tuple[str, str], str] = {}


def remember_original(path: str, migrated: str, original: str) -> None:
    if len(_ORIGINALS) >= 64:
        _ORIGINALS.pop(next(iter(_ORIGINALS)))
    _ORIGINALS[(os.path.realpath(path), migrated)] = original


def base_original(path: str, text: str) -> str:
    """The OpSlot-era text of the spec at ``path`` whose current text is ``text`` (``text`` when unknown)."""
    return _ORIGINALS.get((os.path.realpath(path), text), text)


def is_spec(text: str, path: str) -> bool:
    return path.endswith("_patch_gen_config.py") or bool(re.search(r"^\w+\s*=\s*PatchConfig\(", text, re.M))


def registered_functions(tree: ast.Module, config_name: str) -> dict[str, str]:
    """``config.override_method("T", replacement=fn)`` / ``replace_function`` calls: fn -> target."""
    out: dict[str, str] = {}
    for stmt in tree.body:
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if not isinstance(call, ast.Call):
            continue
        name = _dotted(call.func) or ""
        if name not in (f"{config_name}.override_method", f"{config_name}.replace_function"):
            continue
        target = const_str(call.args[0]) if call.args else None
        repl = next((k.value for k in call.keywords if k.arg == "replacement"), None)
        if target and isinstance(repl, ast.Name):
            out[repl.id] = target
    return out


def base_spec_import(tree: ast.Module, path: str) -> tuple[ast.ImportFrom, str] | None:
    """The ``from <...>_patch_gen_config import ...`` of another spec (its GPU sibling, or another model's spec
    whose patch functions this one reuses) that brings patch functions, and that spec's file path."""
    for stmt in tree.body:
        if not (isinstance(stmt, ast.ImportFrom) and (stmt.module or "").endswith("_patch_gen_config")):
            continue
        if all(a.name == "config" for a in stmt.names):
            continue
        parts = (stmt.module or "").split(".")
        here = os.path.dirname(os.path.abspath(path))
        if stmt.level or len(parts) < 2 or parts[-2] == os.path.basename(here):
            base = os.path.join(here, parts[-1] + ".py")
        else:
            base = os.path.join(os.path.dirname(here), parts[-2], parts[-1] + ".py")
        if os.path.abspath(base) == os.path.abspath(path):
            continue
        return stmt, base
    return None


def spec_registrations(tree: ast.Module, text: str, config_name: str) -> dict[str, tuple[str, str | None]]:
    """``config.override_method("T", replacement=fn[, name_map=M])`` calls: fn -> (target, source of M)."""
    out: dict[str, tuple[str, str | None]] = {}
    for stmt in tree.body:
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if not isinstance(call, ast.Call):
            continue
        if (_dotted(call.func) or "") not in (
            f"{config_name}.override_method",
            f"{config_name}.replace_function",
        ):
            continue
        target = const_str(call.args[0]) if call.args else None
        repl = next((k.value for k in call.keywords if k.arg == "replacement"), None)
        name_map = next((k.value for k in call.keywords if k.arg == "name_map"), None)
        if target and isinstance(repl, ast.Name):
            source = ast.get_source_segment(text, name_map) if name_map is not None else None
            out[repl.id] = (target, source)
    return out


def added_imports(tree: ast.Module, config_name: str) -> dict[str, str]:
    """``config.add_import(module, names=[...])`` calls of a spec: name -> module."""
    out: dict[str, str] = {}
    for stmt in tree.body:
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if not (
            isinstance(call, ast.Call) and _dotted(call.func) == f"{config_name}.add_import" and call.args
        ):
            continue
        module = const_str(call.args[0])
        names_kw = next((k.value for k in call.keywords if k.arg == "names"), None)
        if module and isinstance(names_kw, (ast.List, ast.Tuple)):
            for element in names_kw.elts:
                name = const_str(element)
                if name:
                    out[name] = module
    return out


def spec_functions(tree: ast.Module, config_name: str) -> dict[str, tuple[str, str]]:
    """Top-level patch functions of a spec: name -> (decorator kind, target)."""
    out: dict[str, tuple[str, str]] = {}
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            dec = decorator_target(stmt, config_name)
            if dec and dec[0] in ("override_method", "replace_function") and dec[1]:
                out[stmt.name] = dec
    return out
