"""NPU628 parallel-flag-ignored."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import nodes_of, statements
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni.parallelgate import (
    bool_flag_params,
    conjuncts,
    is_parallel_gate,
    is_stub,
    may_take_flag,
    names_read,
    parallel_gate,
    parallel_word,
    parallel_words,
)


class ParallelFlagIgnored(Rule):
    code = "NPU628"
    name = "parallel-flag-ignored"
    summary = (
        "A function accepts a flag that switches that path (`skip_ulysses=False`) and never "
        "reads it, or reads it at one of its parallel gates and not at its twin."
    )
    why = (
        "Attention backends, sequence-parallel helpers and FSDP/EP wrappers take boolean flags that turn a "
        "parallel step off for one caller: `skip_ulysses=True` for a vision tower whose q/k/v are already "
        "full-sequence, an async-Ulysses block that did its own all-to-all. The flag is a contract with every "
        "caller: a backend that accepts it and does not test it (or tests it only before the output all-to-all "
        "and not before the input one) runs the collective anyway, so the heads are scattered over the "
        "sequence-parallel group while the output is never gathered back: wrong shapes or silently wrong "
        "attention whenever that group has more than one rank, and only on the callers that set the flag. "
        "Two checks: a boolean parameter named for a parallel mode (ulysses, sp, cp, ep, fsdp, async, gather, "
        "scatter, ...) that its function never reads nor `del`s (every function that runs a parallel path or calls something "
        "that could take the flag, but interface stubs: a wrapper that drops the flag instead of forwarding it "
        "breaks the contract as much as the backend); and, in a function, two `if` gates on the same parallel "
        "condition (`ulysses_enabled`) where one tests (itself, or an `if` around or inside it) a flag naming "
        "that mode (`skip_ulysses`) and the other does not. A flag naming a direction (`gather_output`, "
        "`input_is_parallel`) switches one half of the step by design."
    )
    bad = (
        Example(
            """
            from veomni.distributed.parallel_state import get_parallel_state


            def attention_forward(q, k, v, skip_ulysses: bool = False):
                ps = get_parallel_state()
                if ps.ulysses_enabled:
                    q = gather_seq_scatter_heads(q, seq_dim=1, head_dim=2)
                out = kernel(q, k, v)
                if ps.ulysses_enabled and not skip_ulysses:
                    out = gather_heads_scatter_seq(out, seq_dim=1, head_dim=2)
                return out
            """,
            path="veomni/ops/kernels/attention/toy.py",
            title="the input all-to-all ignores the flag the output one honours",
        ),
        Example(
            """
            from veomni.distributed.parallel_state import get_parallel_state


            def flex_forward(q, k, v, skip_ulysses: bool = False):
                ulysses_enabled = get_parallel_state().ulysses_enabled
                if ulysses_enabled:
                    q = gather_seq_scatter_heads(q, seq_dim=1, head_dim=2)
                out = kernel(q, k, v)
                if ulysses_enabled:
                    out = gather_heads_scatter_seq(out, seq_dim=1, head_dim=2)
                return out
            """,
            path="veomni/ops/kernels/attention/toy.py",
            title="the flag is accepted and never read",
        ),
    )
    good = (
        Example(
            """
            from veomni.distributed.parallel_state import get_parallel_state


            def flex_forward(q, k, v, skip_ulysses: bool = False, causal: bool = True):
                ulysses_enabled = get_parallel_state().ulysses_enabled and not skip_ulysses
                if ulysses_enabled:
                    q = gather_seq_scatter_heads(q, seq_dim=1, head_dim=2)
                out = kernel(q, k, v)
                if ulysses_enabled:
                    out = gather_heads_scatter_seq(out, seq_dim=1, head_dim=2)
                return out
            """,
            path="veomni/ops/kernels/attention/toy.py",
        ),
    )
    fix_safety = "No fix: where the flag belongs in the gate is for the author to say."

    requires = (("=False", "= False", "=True", "= True"),)
    node_types = (ast.FunctionDef, ast.AsyncFunctionDef)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        """Every file but tests: attention backends live in veomni/ops, the wrappers in veomni/distributed."""
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        flags = bool_flag_params(node)
        if not flags or is_stub(node):
            return
        read = names_read(node)
        # a function with no parallel path and no call that could take the flag keeps it for signature parity
        for arg in flags if may_take_flag(node) else ():
            if arg.arg not in read:
                self.report(
                    self._first_gate(node) or arg,
                    f"`{arg.arg}` is accepted and never read: `{node.name}` (and whatever it calls) runs its "
                    f"parallel path whatever a caller passes, so a caller that sets `{arg.arg}` to switch that "
                    "path gets the collective anyway",
                )
        self._twin_gates(node, {a.arg for a in flags if a.arg in read})

    def _first_gate(self, func: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.AST | None:
        """Where the flag belongs: the first statement binding or testing a parallel condition
        (``ulysses_enabled = ps.ulysses_enabled``, ``if ps.sp_enabled:``)."""
        for stmt in sorted(statements(func), key=lambda s: (s.lineno, s.col_offset)):
            if (
                isinstance(stmt, ast.Assign)
                and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)
            ):
                if parallel_word(stmt.targets[0].id) and parallel_gate(stmt.value) is not None:
                    return stmt
            elif isinstance(stmt, (ast.If, ast.While)) and parallel_gate(stmt.test) is not None:
                return stmt.test
        return None

    def _twin_gates(self, func: ast.AST, flags: set[str]) -> None:
        # only a flag naming the gate's mode pairs two gates (``skip_ulysses`` with ``ulysses_enabled``); a
        # flag naming a direction (``gather_output``, ``input_is_parallel``) switches one half by design
        flags = {f for f in flags if not _DIRECTION_WORDS & set(f.lower().split("_"))}
        if not flags:
            return
        parent: dict[ast.AST, ast.If] = {}
        for stmt in nodes_of(func, ast.If):
            assert isinstance(stmt, ast.If)
            for inner in nodes_of(stmt, ast.If):
                if inner is not stmt:
                    parent.setdefault(inner, stmt)  # type: ignore[arg-type]
        gates: list[tuple[ast.If, list[tuple[str, set[str]]], set[str]]] = []
        for stmt in nodes_of(func, ast.If):
            assert isinstance(stmt, ast.If)
            keys: list[tuple[str, set[str]]] = []
            for part in conjuncts(stmt.test):
                if not _flag_names(part, flags) and is_parallel_gate(part):
                    keys.append((ast.dump(part), parallel_words(part)))
            if not keys:
                continue
            # a flag tested by this gate, an enclosing one or one nested in its body
            used = _flag_names(stmt.test, flags)
            for inner in nodes_of(stmt, ast.If):
                used |= _flag_names(inner.test, flags)  # type: ignore[attr-defined]
            outer = parent.get(stmt)
            while outer is not None:
                used |= _flag_names(outer.test, flags)
                outer = parent.get(outer)
            gates.append((stmt, keys, used))
        for stmt, keys, used in gates:
            for other, other_keys, other_used in gates:
                shared = [w for k, w in keys if k in {ok for ok, _ in other_keys}]
                if other is stmt or not shared:
                    continue
                words = set().union(*shared)
                missing = sorted(f for f in other_used - used if words & set(f.lower().split("_")))
                if missing:
                    self.report(
                        stmt.test,
                        f"this parallel gate does not test `{missing[0]}`, which the gate at line {other.lineno} on "
                        f"the same condition does: a caller that sets `{missing[0]}` skips one half of the "
                        "parallel step and still runs this one",
                    )
                    break


_DIRECTION_WORDS = frozenset({"gather", "scatter", "input", "output", "in", "out"})


def _flag_names(node: ast.AST, flags: set[str]) -> set[str]:
    return {n.id for n in nodes_of(node, ast.Name)} & flags  # type: ignore[attr-defined]
