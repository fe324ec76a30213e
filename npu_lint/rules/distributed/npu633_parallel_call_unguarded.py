"""NPU633 parallel-call-unguarded."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import call_name
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.parallelgate import collective_call, parallel_gate


def _exits(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Raise, ast.Continue))


class ParallelCallUnguarded(Rule):
    code = "NPU633"
    name = "parallel-call-unguarded"
    summary = (
        "A collective or sequence-parallel helper is called without the parallel gate (`if ps.sp_enabled:`) "
        "that every other call of it in the file runs under."
    )
    why = (
        "Sequence-parallel and expert-parallel code calls its collectives (`gather_outputs`, "
        "`gather_seq_scatter_heads`, `all_to_all`, `slice_input_tensor`) only when the parallel mode is on: the "
        "file's other calls of the same helper sit under `if ps.sp_enabled:` / `if ulysses_enabled:` or after "
        "an early `return` when it is off. A call of that helper outside any such gate runs the collective on "
        "every configuration: with the mode off it gathers or slices along a group of one rank (or of the "
        "wrong ranks), doubles the sequence, or blocks on a group the other ranks never join; with it on, the "
        "step may run twice. The reference is the file itself: a helper called at least twice under a "
        "parallel gate (an enclosing `if`/`while`/conditional expression whose condition names a parallel "
        "mode, or an earlier `if not <mode>: return` in the function) and exactly once without one is "
        "reported at that one call."
    )
    bad = (
        Example(
            """
            from veomni.distributed.parallel_state import get_parallel_state


            def embed(self, x):
                if get_parallel_state().sp_enabled:
                    x = slice_input_tensor(x, dim=1)
                return x


            def head(self, x):
                if get_parallel_state().sp_enabled:
                    x = gather_outputs(x, gather_dim=1)
                return x


            def vision(self, x):
                if get_parallel_state().sp_enabled:
                    x = slice_input_tensor(x, dim=0)
                x = self.blocks(x)
                x = gather_outputs(x, gather_dim=0)
                return x


            def audio(self, x):
                if not get_parallel_state().sp_enabled:
                    return x
                return gather_outputs(x, gather_dim=0)
            """,
            path="veomni/models/transformers/toy_omni/modeling_toy_omni.py",
            title="one gather of the vision tower outside the SP gate its siblings use",
        ),
    )
    good = (
        Example(
            """
            from veomni.distributed.parallel_state import get_parallel_state


            def head(self, x):
                if get_parallel_state().sp_enabled:
                    x = gather_outputs(x, gather_dim=1)
                return x


            def vision(self, x):
                sp = get_parallel_state().sp_enabled
                x = self.blocks(x)
                x = gather_outputs(x, gather_dim=0) if sp else x
                return x
            """,
            path="veomni/models/transformers/toy_omni/modeling_toy_omni.py",
        ),
    )
    fix_safety = "No fix: which gate the call belongs under is the author's to say."

    requires = (("gather", "scatter", "all_to_all", "all_reduce", "slice_input"),)
    node_types = (ast.Call,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self._calls: dict[str, list[tuple[ast.Call, str | None, str | None]]] = {}
        # every call of a plain name: whether it runs under a parallel gate
        self._callers: dict[str, list[bool]] = {}

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Call)
        parents = self.ctx.parents
        func = node.func
        callee = call_name(node)
        if isinstance(func, ast.Name) or (isinstance(func, ast.Attribute) and _self_call(func)):
            self._callers.setdefault(callee, []).append(self._gate(node, parents) is not None)
        name = collective_call(node)
        if name is None:
            return
        owner = next(
            (a for a in reversed(parents) if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef))), None
        )
        self._calls.setdefault(name, []).append(
            (node, self._gate(node, parents), owner.name if owner else None)
        )

    def _gate(self, call: ast.Call, parents: list[ast.AST]) -> str | None:
        """The parallel condition the call runs under, as written (None: none)."""
        for anc in reversed(parents):
            if isinstance(anc, (ast.If, ast.IfExp, ast.While)):
                gate = parallel_gate(anc.test)
                if gate is not None:
                    return ast.unparse(gate)
            if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                if isinstance(anc, ast.Lambda):
                    return None
                for stmt in anc.body:
                    if stmt.lineno >= call.lineno:
                        break
                    if isinstance(stmt, ast.If) and _exits(stmt.body):
                        gate = parallel_gate(stmt.test)
                        if gate is not None:
                            return ast.unparse(gate)
                    if isinstance(stmt, ast.Assert) and parallel_gate(stmt.test) is not None:
                        return ast.unparse(stmt.test)
                return None
        return None

    def finish(self) -> None:
        for name, calls in self._calls.items():
            gates = [g for _, g, _ in calls if g is not None]
            bare = [c for c, g, owner in calls if g is None and not self._gated_helper(owner)]
            if len(gates) >= 2 and len(bare) == 1:
                self.report(
                    bare[0].func,
                    f"`{name}(...)` runs here without a parallel gate, where the file's {len(gates)} other calls "
                    f"of it run under one (`{gates[0]}`): this collective runs on every configuration",
                )

    def _gated_helper(self, owner: str | None) -> bool:
        """The call is in a local helper every caller of which (in this file) gates it, or in a private helper
        (``_gather_seq``) no code of this file calls: its callers elsewhere own the gate."""
        if owner is None:
            return False
        callers = self._callers.get(owner, [])
        if callers:
            return all(callers)
        return owner.startswith("_") and not owner.startswith("__")


def _self_call(func: ast.Attribute) -> bool:
    return isinstance(func.value, ast.Name) and func.value.id in ("self", "cls")
