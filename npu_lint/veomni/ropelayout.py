"""The rotary-embedding layout a module follows: rotate-half or interleaved pairs (NPU309).

A rotary embedding rotates channel pairs; which channels pair up is a convention the whole module shares. The
rotate-half convention pairs channel ``i`` with ``i + d/2``: its cos/sin tables repeat the frequencies as two halves
(``torch.cat((freqs, freqs), dim=-1)``) and its eager rotation negates and swaps the halves (``rotate_half``:
``torch.cat((-x2, x1), dim=-1)`` over ``x[..., : d // 2]`` / ``x[..., d // 2 :]`` or ``x.chunk(2, dim=-1)``). The
interleaved convention pairs adjacent channels: tables repeat each frequency for its pair
(``repeat_interleave(2, dim=-1)``), the rotation works on ``x[..., ::2]`` / ``x[..., 1::2]`` (``rotate_every_two``,
``torch.stack((-x2, x1), dim=-1).flatten(-2)``), or the module multiplies complex numbers made of adjacent pairs
(``torch.view_as_complex``). ``torch_npu.npu_rotary_mul`` is told the convention by ``rotary_mode`` ("half" /
"interleave"); a call whose mode is not the module's rotates other pairs than the tables were built for.

:func:`module_layouts` reads the evidence of one module's tree: ``{layout: (line, what)}`` (the first piece of
evidence of each layout). Table steps count only in rotary code (a function, class or assigned name that spells a
rotary word, or an operand that takes ``.cos()`` / ``.sin()``), so a gate/up split or a CFG batch concatenation is
not read as a rotary table. Nothing is imported or executed.
"""

from __future__ import annotations

import ast
import os

from npu_lint.core.astutil import int_value, last_name, module_package
from npu_lint.core.memo import per_tree

HALF = "half"
INTERLEAVE = "interleave"

_ROTARY_WORDS = frozenset(
    {
        "rope",
        "rotary",
        "rotate",
        "freqs",
        "freq",
        "emb",
        "cos",
        "sin",
        "theta",
        "angles",
        "angle",
        "inv",
        "pos",
    }
)
_HALF_NAMES = frozenset({"rotate_half"})
_INTERLEAVE_NAMES = frozenset({"rotate_every_two", "rotate_interleave", "rotate_interleaved", "rotate_pairs"})


def _parts(name: str) -> list[str]:
    return [p for p in name.lower().replace(".", "_").split("_") if p]


def _rotary_name(name: str | None) -> bool:
    """A name that spells a rotary word (``rotary_pos_emb``, ``freqs_cis``, ``cos``, ``ropeembedder``)."""
    return bool(name) and any(
        p in _ROTARY_WORDS or p.startswith(("freq", "rope", "rotar", "rotat")) for p in _parts(name or "")
    )


def _dim(call: ast.Call, index: int) -> int | None:
    node = next((k.value for k in call.keywords if k.arg in ("dim", "axis")), None)
    if node is None and index < len(call.args):
        node = call.args[index]
    return int_value(node) if node is not None else None


def _slice_kind(node: ast.AST) -> str | None:
    """``x[..., ::2]`` / ``x[..., 1::2]``: interleave; ``x[..., : d // 2]`` / ``x[..., d // 2 :]``: half."""
    if not isinstance(node, ast.Subscript):
        return None
    index = node.slice
    last = index.elts[-1] if isinstance(index, ast.Tuple) and index.elts else index
    if not isinstance(last, ast.Slice):
        return None
    if last.step is not None and int_value(last.step) == 2:
        return INTERLEAVE
    bound = last.upper if last.upper is not None else last.lower
    if isinstance(bound, ast.BinOp) and isinstance(bound.op, ast.FloorDiv) and int_value(bound.right) == 2:
        return HALF
    return None


def _rotation_helper(func: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """The convention of an eager rotation helper, from its body: halves taken by ``// 2`` slices or ``chunk(2,
    dim=-1)`` and concatenated negated (half); pairs taken by stride-2 slices, or stacked on a new last axis
    (interleave). Falls back to its name (``rotate_half``, ``rotate_every_two``)."""
    negated_join: ast.Call | None = None
    splits: set[str] = set()
    for node in ast.walk(func):
        kind = _slice_kind(node)
        if kind is not None:
            splits.add(kind)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if (
                node.func.attr == "chunk"
                and node.args
                and int_value(node.args[0]) == 2
                and _dim(node, 1) == -1
            ):
                splits.add(HALF)
            if node.func.attr in ("cat", "concat", "stack") and node.args:
                parts = node.args[0]
                if isinstance(parts, (ast.Tuple, ast.List)) and len(parts.elts) == 2:
                    if any(isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub) for e in parts.elts):
                        negated_join = node
    if negated_join is not None:
        assert isinstance(negated_join.func, ast.Attribute)
        if negated_join.func.attr == "stack" and _dim(negated_join, 1) == -1:
            return INTERLEAVE
        if len(splits) == 1:
            return next(iter(splits))
    if any(p.startswith("rotat") for p in _parts(func.name)):
        if func.name in _HALF_NAMES:
            return HALF
        if func.name in _INTERLEAVE_NAMES:
            return INTERLEAVE
    return None


_DTYPE_WORDS = frozenset({"to", "as", "cast", "precision", "fp16", "dtype", "float", "float16"})


def _named_convention(name: str) -> str | None:
    """A rotary function named for one convention (``apply_split_rotary_emb``, ``apply_interleaved_rope``): the
    module works in that convention too, whatever its body does (it may hand the work to a kernel)."""
    parts = _parts(name)
    if not _rotary_name(name):
        return None
    interleaved = any(p.startswith("interleav") for p in parts) or "every" in parts and "two" in parts
    # ``half`` also names the fp16 dtype (``freqs_to_half``, ``rope_half_precision``): not a layout then
    halves = "split" in parts or ("half" in parts and not _DTYPE_WORDS & set(parts))
    if interleaved == halves:
        return None
    return INTERLEAVE if interleaved else HALF


def _same(a: ast.AST, b: ast.AST) -> bool:
    return ast.dump(a) == ast.dump(b)


def _table_step(call: ast.Call) -> str | None:
    """One step of a cos/sin table's construction along the last axis: ``torch.cat((f, f), dim=-1)`` (the same
    operand twice) lays out halves; ``f.repeat_interleave(2, dim=-1)`` repeats each frequency for its pair;
    ``torch.view_as_complex`` pairs adjacent channels."""
    if not isinstance(call.func, ast.Attribute):
        return None
    name = call.func.attr
    if name == "view_as_complex":
        return INTERLEAVE
    if name == "repeat_interleave":
        first = 1 if isinstance(call.func.value, ast.Name) and call.func.value.id == "torch" else 0
        repeats = next((k.value for k in call.keywords if k.arg == "repeats"), None)
        if repeats is None and first < len(call.args):
            repeats = call.args[first]
        if repeats is not None and int_value(repeats) == 2 and _dim(call, first + 1) == -1:
            return INTERLEAVE
        return None
    if name in ("cat", "concat") and call.args and _dim(call, 1) == -1:
        parts = call.args[0]
        if isinstance(parts, (ast.Tuple, ast.List)) and len(parts.elts) == 2 and _same(*parts.elts):
            return HALF
    if name == "stack" and call.args and _dim(call, 1) == -1:
        # ``torch.stack((f, f), dim=-1).flatten(-2)``: each frequency beside itself, for its adjacent pair
        parts = call.args[0]
        if isinstance(parts, (ast.Tuple, ast.List)) and len(parts.elts) == 2 and _same(*parts.elts):
            return INTERLEAVE
    return None


def _takes_trig(node: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Call) and last_name(n.func) in ("cos", "sin", "polar") for n in ast.walk(node)
    ) or any(isinstance(n, ast.Attribute) and n.attr in ("real", "imag") for n in ast.walk(node))


class _Reader(ast.NodeVisitor):
    def __init__(self) -> None:
        self.found: dict[str, tuple[int, str]] = {}
        self.scopes: list[str] = []

    def _add(self, layout: str, line: int, what: str) -> None:
        self.found.setdefault(layout, (line, what))

    def _scope(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef, params: list[str]) -> None:
        """Enter a scope named (and, for a function, parameterised) by ``node``: a rotary word in the scope's
        name or parameters (``freqs_cis``) makes its table steps rotary."""
        self.scopes.append(node.name)
        self.scopes.extend(params)
        self.generic_visit(node)
        del self.scopes[len(self.scopes) - 1 - len(params) :]

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:  # noqa: N802 - ast visitor protocol
        layout = _rotation_helper(node)
        if layout is not None:
            self._add(layout, node.lineno, f"`{node.name}` rotates {_PAIRS[layout]}")
        else:
            layout = _named_convention(node.name)
            if layout is not None:
                self._add(layout, node.lineno, f"`{node.name}` is named for {_PAIRS[layout]}")
        self._scope(node, [a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)])

    visit_AsyncFunctionDef = visit_FunctionDef  # noqa: N815 - ast visitor protocol

    def visit_ClassDef(self, node: ast.ClassDef) -> None:  # noqa: N802 - ast visitor protocol
        self._scope(node, [])

    def visit_Assign(self, node: ast.Assign) -> None:  # noqa: N802 - ast visitor protocol
        self._statement(node, node.targets, node.value)
        self.generic_visit(node)

    def visit_Return(self, node: ast.Return) -> None:  # noqa: N802 - ast visitor protocol
        if node.value is not None:
            self._statement(node, [], node.value)
        self.generic_visit(node)

    def _statement(self, stmt: ast.stmt, targets: list[ast.expr], value: ast.expr) -> None:
        names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
        names += [n.attr for t in targets for n in ast.walk(t) if isinstance(n, ast.Attribute)]
        rotary = any(_rotary_name(s) for s in self.scopes) or any(_rotary_name(n) for n in names)
        for node in ast.walk(value):
            if not isinstance(node, ast.Call):
                continue
            layout = _table_step(node)
            if layout is None:
                continue
            if rotary or _takes_trig(value) or any(_rotary_name(last_name(a)) for a in ast.walk(node)):
                self._add(layout, stmt.lineno, f"`{ast.unparse(node)[:60]}` lays out {_PAIRS[layout]}")


_PAIRS = {
    HALF: "the two halves of each head (rotate-half)",
    INTERLEAVE: "adjacent channel pairs (interleaved)",
}


@per_tree
def module_layouts(tree: ast.AST) -> dict[str, tuple[int, str]]:
    """The rotary conventions one module's code follows, each with its first evidence ``(line, what)``: its own
    tables and rotation helpers, and the rotation helpers it imports by name."""
    reader = _Reader()
    reader.visit(tree)
    found = dict(reader.found)
    if isinstance(tree, ast.Module):
        for layout, where in imported_rotation(tree).items():
            found.setdefault(layout, where)
    return found


def imported_rotation(tree: ast.Module) -> dict[str, tuple[int, str]]:
    """Rotation helpers the module imports by their conventional names (``from ...modeling_x import
    rotate_half``)."""
    out: dict[str, tuple[int, str]] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom):
            for alias in stmt.names:
                if alias.name in _HALF_NAMES:
                    out.setdefault(HALF, (stmt.lineno, f"imports `{alias.name}`"))
                elif alias.name in _INTERLEAVE_NAMES:
                    out.setdefault(INTERLEAVE, (stmt.lineno, f"imports `{alias.name}`"))
    return out


def convention(tree: ast.Module, text: str, path: str) -> tuple[str, str] | None:
    """The one rotary convention the module at ``path`` works in, with where it says so (``"line N: ..."`` or
    ``"<module> line N: ..."``), or None when its code says nothing or says both. Read, in order, from the module
    itself (a generated file holds upstream's code), the upstream module a spec or generated file copies, and the
    modules of its own package it imports (an adapter's eager fallback, ``from . import eager as _eager``)."""
    own = module_layouts(tree)
    if own:
        return _one(own, "")
    from npu_lint.veomni.patchgen import load_file
    from npu_lint.veomni.upstream import file_source_module, module_path

    source = file_source_module(tree, text, path)
    upstream = module_path(source) if source else None
    if upstream is not None:
        parsed = load_file(upstream)
        if parsed is not None and parsed.tree is not None:
            found = module_layouts(parsed.tree)
            if found:
                return _one(found, f"`{source}` ")
    seen: dict[str, tuple[int, str]] = {}
    where = ""
    for module, file in _package_imports(tree, path):
        parsed = load_file(file)
        if parsed is None or parsed.tree is None:
            continue
        for layout, found in module_layouts(parsed.tree).items():
            if layout not in seen:
                seen[layout] = found
                where = f"`{module}` "
    return _one(seen, where) if seen else None


def _one(found: dict[str, tuple[int, str]], where: str) -> tuple[str, str] | None:
    if len(found) != 1:
        return None
    layout, (line, what) = next(iter(found.items()))
    return layout, f"{where}line {line}: {what}"


def _package_imports(tree: ast.Module, path: str) -> list[tuple[str, str]]:
    """The modules of the file's own package that its top level or functions import relatively (``from . import
    eager``, ``from .eager import forward``), as ``(name, file)`` for those that exist."""
    directory = os.path.dirname(os.path.abspath(path))
    package = module_package(path)
    out: list[tuple[str, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.level != 1:
            continue
        names = [node.module] if node.module else [a.name for a in node.names]
        for name in names:
            if not name or "." in name:
                continue
            file = os.path.join(directory, name + ".py")
            if os.path.isfile(file) and os.path.abspath(file) != os.path.abspath(path):
                out.append((".".join([*package, name]), file))
    return out


def imported_helper(tree: ast.Module, name: str) -> bool:
    """Whether ``name`` is imported into the module (``from .rope import rope_tables``, ``import x as name``)."""
    for stmt in tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            if any((a.asname or a.name.split(".")[0]) == name for a in stmt.names):
                return True
    return False


def helper_convention(tree: ast.Module, path: str, name: str) -> tuple[str, str] | None:
    """The one rotary convention of the module of the package that ``name`` is imported from relatively
    (``from .tables import rope_tables``: the tables are built there, not in this module), or None."""
    from npu_lint.veomni.patchgen import load_file

    for stmt in tree.body:
        if not isinstance(stmt, ast.ImportFrom) or stmt.level != 1 or not stmt.module or "." in stmt.module:
            continue
        if not any((a.asname or a.name) == name for a in stmt.names):
            continue
        file = os.path.join(os.path.dirname(os.path.abspath(path)), stmt.module + ".py")
        parsed = load_file(file) if os.path.isfile(file) else None
        if parsed is None or parsed.tree is None:
            return None
        found = module_layouts(parsed.tree)
        return _one(found, f"`{stmt.module}` ") if found else None
    return None


_MROPE_WORDS = ("mrope_section", "mrope")


def _upstream_spells_mrope(module: str) -> bool:
    from npu_lint.core.safeio import read_text
    from npu_lint.veomni.upstream import upstream_path

    path = upstream_path(module)
    if path is None:
        return False
    try:
        return "mrope_section" in read_text(path)
    except (OSError, ValueError):
        return False


_MROPE_MODULES: dict[str, bool] = {}


def uses_mrope(text: str, module: str | None) -> bool:
    """Whether a module's rotary embedding is multimodal (M-RoPE: 3 rows of position ids, temporal / height /
    width, split by ``mrope_section``): the module spells it, or the upstream transformers module it patches or
    copies (``module``) does. Read, never imported."""
    if any(word in text for word in _MROPE_WORDS):
        return True
    if not module or not module.startswith("transformers."):
        return False
    if module not in _MROPE_MODULES:
        if len(_MROPE_MODULES) > 256:
            _MROPE_MODULES.clear()
        _MROPE_MODULES[module] = _upstream_spells_mrope(module)
    return _MROPE_MODULES[module]
