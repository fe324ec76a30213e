"""The module scope of a generated file, as its spec will produce it.

patchgen copies the upstream transformers module (its imports, minus the spec's dropped names; its classes and
functions), adds the spec's `add_import` names and post-import blocks, emits each `add_helper` definition under
its own name, and writes each patch's replacement body into the class or function it patches (after `name_map`).
The replacement bodies are read from wherever the spec takes them (an NPU spec reuses the GPU spec's functions by
importing them), but they run in the generated module: every global name they read must be bound there. A spec that
picks helpers a la carte and leaves one out, or a body that uses a name the spec imports for itself but never
`add_import`s, fails with NameError in the generated module only (often the NPU one, which the GPU CI never runs).
"""

from __future__ import annotations

import ast
import builtins
import os
import textwrap
from dataclasses import dataclass

from npu_lint.core.astutil import nodes_of, parse_snippet, walk
from npu_lint.veomni.patchgen import (
    Patch,
    Spec,
    apply_name_map,
    effective_added_imports,
    effective_drops,
    effective_helpers,
    effective_patches,
    effective_post_blocks,
    load_file,
    load_spec,
)
from npu_lint.veomni.upstream import upstream_path

__all__ = ["UnboundName", "module_bindings", "generated_scope", "unbound_names", "upstream_copy_edits"]

_BUILTINS = frozenset(dir(builtins)) | {"__file__", "__name__", "__doc__", "__spec__", "__package__"}


def module_bindings(body: list[ast.stmt]) -> set[str] | None:
    """Names a module body binds at top level (imports, defs, classes, assignments; inside `if` / `try` /
    `with` too). None when it star-imports (anything may be bound)."""
    out: set[str] = set()
    todo = list(body)
    while todo:
        stmt = todo.pop()
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            for alias in stmt.names:
                if alias.name == "*":
                    return None
                out.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(stmt.name)
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.With)):
            for node in walk(stmt):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    out.add(node.id)
            if isinstance(stmt, (ast.For, ast.With)):
                todo.extend(stmt.body)
        elif isinstance(stmt, ast.If):
            todo.extend(stmt.body)
            todo.extend(stmt.orelse)
        elif isinstance(stmt, ast.Try):
            todo.extend(stmt.body)
            todo.extend(stmt.orelse)
            todo.extend(stmt.finalbody)
            for handler in stmt.handlers:
                todo.extend(handler.body)
                if handler.name:
                    out.add(handler.name)
    return out


# the node kinds that bind a name (``_local_names`` reads only these)
BINDERS = (
    ast.arg,
    ast.Name,
    ast.Import,
    ast.ImportFrom,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.ExceptHandler,
    ast.Global,
    ast.Nonlocal,
    ast.MatchAs,
)


def _local_names(func: ast.AST) -> set[str]:
    """Every name a definition binds anywhere inside it (parameters, stores, imports, nested defs, globals it
    declares, exception names): an over-approximation of its local scopes, so a name read is free only when
    nothing inside binds it."""
    out: set[str] = set()
    for node in nodes_of(func, *BINDERS):
        if isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            out.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update(a.asname or a.name.split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not func:
            out.add(node.name)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            out.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            out.update(node.names)
        elif isinstance(node, ast.MatchAs) and node.name:
            out.add(node.name)
    return out


def _free_reads(node: ast.AST) -> dict[str, ast.Name]:
    """Global names a definition reads (first read of each), its decorators excluded (patchgen drops them)."""
    local = _local_names(node)
    skip: set[int] = set()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        for deco in node.decorator_list:
            skip.update(id(n) for n in walk(deco))
    out: dict[str, ast.Name] = {}
    for n in nodes_of(node, ast.Name):
        if isinstance(n.ctx, ast.Load) and id(n) not in skip:  # type: ignore[attr-defined]
            if n.id not in local and n.id not in _BUILTINS and n.id not in out:
                out[n.id] = n
    return out


@dataclass(frozen=True)
class UnboundName:
    patch: Patch  # the registration whose body reads it
    name: str
    def_path: str  # the file the body is written in
    def_line: int


def generated_scope(spec: Spec) -> set[str] | None:
    """The names the generated module of ``spec`` binds at top level, or None when that cannot be told (the
    upstream module unread, a star import, a post-import block that does not parse)."""
    source = _source_module(spec)
    if source is None:
        return None
    path = upstream_path(source)
    parsed = load_file(str(path)) if path is not None else None
    if parsed is None or parsed.tree is None:
        return None
    names = module_bindings(parsed.tree.body)
    if names is None:
        return None
    names -= effective_drops(spec)
    for _path, _line, module, imported in effective_added_imports(spec):
        if not imported:
            names.add(module.split(".")[0])
        names.update(imported)
    names |= _import_aliases(spec)
    for _path, _line, code in effective_post_blocks(spec):
        tree = parse_snippet(textwrap.dedent(code))
        if tree is None:
            return None
        block = module_bindings(tree.body)
        if block is None:
            return None
        names |= block
    for patch in [*effective_patches(spec), *effective_helpers(spec)]:
        if patch.kind == "helper" and patch.replacement:
            names.add(patch.replacement)
        elif patch.kind in ("function_replacement", "class_replacement", "external") and patch.target:
            names.add(patch.target)
    return names


def _import_aliases(spec: Spec, depth: int = 0) -> set[str]:
    """``alias=`` names of the ``add_import`` calls of a spec and of the specs it copies lists from."""
    from npu_lint.veomni.patchgen import _sources

    out: set[str] = set()
    parsed = load_file(spec.path)
    if parsed is not None and parsed.tree is not None and "alias" in parsed.text:
        for node in walk(parsed.tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_import"
            ):
                for kw in node.keywords:
                    if (
                        kw.arg == "alias"
                        and isinstance(kw.value, ast.Constant)
                        and isinstance(kw.value.value, str)
                    ):
                        out.add(kw.value.value)
    if depth < 4:
        for other in _sources(spec):
            out |= _import_aliases(other, depth + 1)
    return out


def _source_module(spec: Spec) -> str | None:
    from npu_lint.veomni.patchgen import base_spec

    current: Spec | None = spec
    for _ in range(4):
        if current is None:
            return None
        if current.source_module:
            return current.source_module
        current = base_spec(current)
    return None


def _chain_texts(spec: Spec, depth: int = 0) -> list[str]:
    """The texts of a spec and of the specs it copies lists from (a helper a copy filters out by name is named
    there as a string)."""
    from npu_lint.veomni.patchgen import _sources

    out = [spec.text]
    if depth < 4:
        for other in _sources(spec):
            out.extend(_chain_texts(other, depth + 1))
    return out


def _owner(spec: Spec, patch: Patch) -> Spec | None:
    if os.path.normpath(patch.spec_path) == os.path.normpath(spec.path):
        return spec
    return load_spec(patch.spec_path)


def unbound_names(spec: Spec) -> list[UnboundName]:
    """Global names the bodies a spec emits read and its generated module will not bind."""
    scope = generated_scope(spec)
    if scope is None:
        return []
    out: list[UnboundName] = []
    seen: set[tuple[str, int]] = set()
    chain = _chain_texts(spec)
    for patch in [*effective_patches(spec), *effective_helpers(spec)]:
        if patch.external_module is not None or not patch.replacement:
            continue
        if (
            patch.kind == "helper"
            and patch.spec_path != spec.path
            and any(f'"{patch.replacement}"' in text for text in chain)
        ):
            continue  # a copied helper the spec names in a string: filtered out of the copy, not emitted
        owner = _owner(spec, patch)
        ref = owner.resolve(patch.replacement) if owner is not None else None
        if ref is None:
            continue
        node: ast.AST = ref.node
        if patch.name_map:
            lines = ref.text.splitlines()
            segment = "\n".join(lines[ref.node.lineno - 1 : ref.node.end_lineno])
            renamed = parse_snippet(textwrap.dedent(apply_name_map(segment, patch.name_map)))
            if renamed is None or not renamed.body:
                continue
            node = renamed.body[0]
        for name, _read in _free_reads(node).items():
            key = (name, id(ref.node))
            if name in scope or key in seen:
                continue
            seen.add(key)
            out.append(UnboundName(patch, name, ref.path, ref.node.lineno))
    return out


# -- the upstream copy -------------------------------------------------------------------------------------------


def _first_diff(mine: list[ast.stmt], theirs: list[ast.stmt]) -> ast.stmt | None:
    from npu_lint.veomni.upstream import same_node

    for a, b in zip(mine, theirs, strict=False):
        if not same_node(a, b):
            inner_a, inner_b = getattr(a, "body", None), getattr(b, "body", None)
            if type(a) is type(b) and isinstance(inner_a, list) and isinstance(inner_b, list):
                deeper = _first_diff(inner_a, inner_b)
                if deeper is not None:
                    return deeper
            return a
    if len(mine) != len(theirs):
        return mine[len(theirs)] if len(mine) > len(theirs) else (mine[-1] if mine else None)
    return None


def upstream_copy_edits(tree: ast.Module, module: str, patched: set[str]) -> list[tuple[str, ast.stmt]]:
    """``(name, first differing statement)`` of each function and class method of a generated file that the
    banner does not list as patched and whose body differs from the upstream module's (syntax trees compared)."""
    path = upstream_path(module)
    parsed = load_file(str(path)) if path is not None else None
    if parsed is None or parsed.tree is None:
        return []
    theirs = {n.name: n for n in parsed.tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    out: list[tuple[str, ast.stmt]] = []
    for node in tree.body:
        up = theirs.get(getattr(node, "name", ""))
        if up is None or type(up) is not type(node) or node.name in patched:  # type: ignore[attr-defined]
            continue
        if isinstance(node, ast.FunctionDef):
            pairs = [(node.name, node, up)]
        else:
            methods = {m.name: m for m in up.body if isinstance(m, ast.FunctionDef)}  # type: ignore[attr-defined]
            pairs = [
                (f"{node.name}.{m.name}", m, methods[m.name])
                for m in node.body  # type: ignore[attr-defined]
                if isinstance(m, ast.FunctionDef)
                and m.name in methods
                and f"{node.name}.{m.name}" not in patched
            ]
        for name, mine, their in pairs:
            diff = _first_diff(mine.body, their.body)  # type: ignore[attr-defined]
            if diff is not None:
                out.append((name, diff))
    return out
