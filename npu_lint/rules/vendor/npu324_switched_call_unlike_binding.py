"""NPU324 switched-call-unlike-binding."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import nodes_of, resolve_relative
from npu_lint.rules._calls import _index, _resolve_dotted
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.patchgen import load_file


def _local_names(func: ast.AST) -> set[str]:
    """A function's parameters and the names it binds."""
    out: set[str] = set()
    for node in nodes_of(func, ast.arg, ast.Name):
        if isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            out.add(node.id)
    return out


def _global_switch(test: ast.expr, local: set[str]) -> bool:
    """A test that reads only module-level state (a hardware or environment probe: `is_arch35()`,
    `IS_NPU_AVAILABLE`, `get_device_type() == "npu"`), nothing of the function's own data."""
    names = [n.id for n in ast.walk(test) if isinstance(n, ast.Name)]
    return bool(names) and not any(n in local for n in names)


def _arm_calls(arm: list[ast.stmt]) -> dict[str, list[ast.Call]]:
    out: dict[str, list[ast.Call]] = {}
    for stmt in arm:
        for call in nodes_of(stmt, ast.Call):
            assert isinstance(call, ast.Call)
            if isinstance(call.func, ast.Name) and not any(k.arg is None for k in call.keywords):
                out.setdefault(call.func.id, []).append(call)
    return out


def _binds(stmt: ast.stmt, name: str) -> bool:
    for node in ast.walk(stmt):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
            (a.asname or a.name).split(".")[0] == name for a in node.names
        ):
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, ast.Name) and node.id == name and not isinstance(node.ctx, ast.Load):
            return True
    return False


def _switched_on_the_way(index, qual: str) -> bool:  # type: ignore[no-untyped-def]
    """Whether a tree module the name is re-exported through binds it under an ``if`` or a ``try`` at its top level
    (``kernels.py``: ``if is_arch35(): from .triton_core.cumsum import f`` / ``else: ...``): the switch moved there."""
    for _hop in range(4):
        module, _dot, name = qual.rpartition(".")
        located = index.module_path(module) if module else None
        parsed = load_file(str(located[0])) if located else None
        if parsed is None or parsed.tree is None:
            return False
        if any(isinstance(stmt, (ast.If, ast.Try)) and _binds(stmt, name) for stmt in parsed.tree.body):
            return True
        info = index.info(module)
        if info is None or name not in info.reexports:
            return False
        source, source_name = info.reexports[name]
        if source_name is None:
            return False
        qual = f"{source}.{source_name}"
    return False


class SwitchedCallUnlikeBinding(Rule):
    code = "NPU324"
    name = "switched-call-unlike-binding"
    summary = (
        "A function switches on a hardware or environment probe (`if is_arch35():`) between two calls of one "
        "imported function, passing a keyword only in one arm, but the module binds that name once, "
        "unconditionally, to a definition without that parameter: the import's own switch was dropped."
    )
    why = (
        "Ascend kernel ports carry two generations of a helper (`triton/solve_tril.py` for older parts, "
        "`triton_core/solve_tril.py` for arch35, whose version takes `chunk_indices=`), and pick one at import "
        "time under the same probe the call sites test: `if is_arch35(): from .triton_core.solve_tril import "
        "solve_tril` / `else: from .triton.solve_tril import solve_tril`. The calls then differ by arm "
        "(`solve_tril(A=A, chunk_indices=..., ...)` under `is_arch35()`, without it otherwise). When an edit "
        "flattens the import to one generation, the arm that passes the other generation's parameter raises "
        "`TypeError` on exactly the hardware the switch was for, and would run a kernel generation that part "
        "does not support; nothing fails on the machine the edit was tested on. The callee is the tree's own "
        "`def`, read through the shared resolver (decorators are looked through: the arms' keywords are the "
        "evidence); the finding sits on the import that binds the name."
    )
    bad = (
        Example(
            """
            from .triton.utils import is_arch35
            from .triton.cumsum import chunk_cumsum


            def local_cumsum(g, cu_seqlens, chunk_indices):
                if is_arch35():
                    return chunk_cumsum(g, cu_seqlens=cu_seqlens, chunk_indices=chunk_indices)
                return chunk_cumsum(g, cu_seqlens=cu_seqlens)
            """,
            path="veomni/ops/kernels/toy_gdr/_ascend/glue.py",
            title="the arch35 arm passes a parameter only the arch35 generation's `chunk_cumsum` takes",
        ),
    )
    good = (
        Example(
            """
            from .triton.utils import is_arch35

            if is_arch35():
                from .triton_core.cumsum import chunk_cumsum
            else:
                from .triton.cumsum import chunk_cumsum


            def local_cumsum(g, cu_seqlens, chunk_indices):
                if is_arch35():
                    return chunk_cumsum(g, cu_seqlens=cu_seqlens, chunk_indices=chunk_indices)
                return chunk_cumsum(g, cu_seqlens=cu_seqlens)
            """,
            path="veomni/ops/kernels/toy_gdr/_ascend/glue.py",
        ),
    )
    fix_safety = (
        "No fix: restore the import's switch (`if <probe>: from <new generation> import f else: ...`)."
    )
    node_types = (ast.If,)
    requires = ("import",)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self._done: set[str] = set()
        self._bindings: dict[str, list[ast.stmt]] | None = None
        self._locals: dict[int, tuple[ast.AST, set[str]]] = {}  # id(function) -> (it, its local names)

    def _bound_by(self) -> dict[str, list[ast.stmt]]:
        """name -> every statement of the file that binds it (imports, defs, assignments)."""
        if self._bindings is None:
            out: dict[str, list[ast.stmt]] = {}
            for node in ast.walk(self.ctx.tree):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    for alias in node.names:
                        out.setdefault((alias.asname or alias.name).split(".")[0], []).append(node)
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    out.setdefault(node.name, []).append(node)
                elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                    out.setdefault(node.id, []).append(node)  # type: ignore[arg-type]
            self._bindings = out
        return self._bindings

    def _after(self, node: ast.If) -> list[ast.stmt]:
        """The other arm of an `if` without `else` whose body returns: the statements after it."""
        if not node.body or not isinstance(node.body[-1], (ast.Return, ast.Raise)):
            return []
        parent = self.ctx.parent
        for field in ("body", "orelse", "finalbody"):
            block = getattr(parent, field, None)
            if isinstance(block, list) and node in block:
                return block[block.index(node) + 1 :]
        return []

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.If)
        func = self.ctx.function
        if func is None:
            return
        other = node.orelse or self._after(node)
        if not other:
            return
        local = self._locals.get(id(func))
        if local is None or local[0] is not func:  # once per function, not per `if` in it
            local = self._locals[id(func)] = (func, _local_names(func))
        if not _global_switch(node.test, local[1]):
            return
        body, orelse = _arm_calls(node.body), _arm_calls(other)
        for name in sorted(body.keys() & orelse.keys()):
            if name in self._done:
                continue
            kb = {k.arg for c in body[name] for k in c.keywords}
            ko = {k.arg for c in orelse[name] for k in c.keywords}
            extra = [(c, k) for c in body[name] for k in c.keywords if k.arg not in ko] + [
                (c, k) for c in orelse[name] for k in c.keywords if k.arg not in kb
            ]
            if not extra:
                continue
            bindings = self._bound_by().get(name, [])
            if len(bindings) != 1 or not isinstance(bindings[0], ast.ImportFrom):
                continue
            binding = bindings[0]
            if binding not in self.ctx.tree.body:
                continue  # bound under an `if` / `try`: switched already
            index = _index(self.ctx)
            qual = self.ctx.imports.get(name)
            if index is None or qual is None:
                continue
            if qual.startswith("."):
                qual = resolve_relative(self.ctx.source.path, qual)
            resolved = _resolve_dotted(index, qual)
            if resolved is None or _switched_on_the_way(index, qual):
                continue
            _origin, sig = resolved
            if sig.kind != "function" or sig.varkw:
                continue
            for call, kw in extra:
                if kw.arg in sig.keywords:
                    continue
                self._done.add(name)
                self.report(
                    binding,
                    f"`{name}` is bound here, unconditionally, to `{qual}`, which has no parameter `{kw.arg}`; "
                    f"yet the `{ast.unparse(node.test)}` switch at line {node.lineno} passes `{kw.arg}=` in one "
                    f"arm only (line {call.lineno}): that arm was written for another implementation and raises "
                    "TypeError on the hardware it serves; switch this import on the same probe",
                )
                break
