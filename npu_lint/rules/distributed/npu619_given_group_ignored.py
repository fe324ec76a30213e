"""NPU619 given-group-ignored."""

from __future__ import annotations

import ast
import re

from npu_lint.core.astutil import call_name
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni import distlife

_LOGGING = re.compile(r"^(print|debug|info|warning|warn|error|exception|critical|log|\w+_rank0|format)$")


def _is_group_value(value: ast.AST, params: set[str]) -> bool:
    """``group``, ``x if group is None else group``, ``group or default``: the given group itself."""
    if isinstance(value, ast.Name):
        return value.id in params
    if isinstance(value, ast.IfExp):
        return _is_group_value(value.body, params) or _is_group_value(value.orelse, params)
    if isinstance(value, ast.BoolOp):
        return any(_is_group_value(v, params) for v in value.values)
    return False


def _forward_group_params(cls: ast.ClassDef) -> set[str]:
    for stmt in cls.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == "forward":
            return distlife.group_params(stmt)
    return set()


def _rebinds_from_state(func: ast.AST, params: set[str]) -> bool:
    """The function overwrites its group parameter from the ambient state on every path (``group = ps.sp_group``):
    the ambient sizes then describe the group it uses."""
    body = getattr(func, "body", [])
    for stmt in body:
        if isinstance(stmt, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id in params for t in stmt.targets
        ):
            if not any(isinstance(sub, ast.Name) and sub.id in params for sub in ast.walk(stmt.value)):
                return True
    return False


class GivenGroupIgnored(Rule):
    code = "NPU619"
    name = "given-group-ignored"
    summary = (
        "A function that is handed a process group (a `group` parameter, or an autograd Function whose forward "
        "got one) reads another group's size or rank: the job's (`dist.get_world_size()`, `dist.get_rank()`), "
        "the ambient parallel state's (`get_parallel_state().ulysses_size`, a getter called without the group)."
    )
    why = (
        "VeOmni's parallel state is owned per module (`use_parallel_state`), and its SP/EP helpers take the "
        "group to communicate over as an argument: SeedOmni passes each module's own group, tests inject one. A "
        "size or rank that is not read from that group describes other ranks: `dist.get_world_size()` and "
        "`dist.get_rank()` without a group are the whole job's (the global rank is not the rank inside the SP "
        "group), and the ambient getters and `get_parallel_state()` fields describe whichever state is current, "
        "which in an autograd backward (run on autograd's thread, outside the forward's context) is none or "
        "another module's. Heads are then split by one size while the all-to-all runs over a group of another, a "
        "gradient is scaled by the wrong factor, or a rank keeps a slice that is not its own, silently. Read "
        "the size and rank from the group the function holds (`dist.get_world_size(group)`), or store them on "
        "`ctx` in the forward. Reads in the fallback branch that handles `group is None` are not reported, nor "
        "in a function that rebinds its group from the ambient state."
    )
    bad = (
        Example(
            """
            import torch.distributed as dist

            from veomni.distributed.parallel_state import get_parallel_state


            def split_heads_for_sp(x, group=None):
                sp = get_parallel_state().ulysses_size
                return x.chunk(sp, dim=2), dist.get_rank(group)
            """,
            path="veomni/distributed/sequence_parallel/toy_split.py",
            title="the global state's size while the caller's group is used",
        ),
        Example(
            """
            import torch
            import torch.distributed as dist

            from veomni.distributed.sequence_parallel.comm import get_unified_sequence_parallel_world_size


            class ToyReduceMean(torch.autograd.Function):
                @staticmethod
                def forward(ctx, value, count, sp_group):
                    dist.all_reduce(value, group=sp_group)
                    return value / count

                @staticmethod
                def backward(ctx, grad):
                    return grad * get_unified_sequence_parallel_world_size(), None, None
            """,
            path="veomni/distributed/sequence_parallel/toy_loss.py",
            title="a backward reading the ambient size its forward was not given",
        ),
    )
    good = (
        Example(
            """
            import torch.distributed as dist

            from veomni.distributed.sequence_parallel.comm import get_ulysses_sequence_parallel_group


            def split_heads_for_sp(x, group=None):
                if group is None:
                    group = get_ulysses_sequence_parallel_group()
                sp = dist.get_world_size(group)
                return x.chunk(sp, dim=2), dist.get_rank(group)


            def describe(x):
                return dist.get_world_size(), dist.get_rank()
            """,
            path="veomni/distributed/sequence_parallel/toy_split.py",
            title="size and rank of the group held; a function given no group",
        ),
    )
    fix_safety = "No fix: pass the group the function holds (`dist.get_world_size(group)`) by hand."
    requires = (
        "group",
        (
            "get_world_size(",
            "get_rank(",
            "_world_size(",
            "_rank(",
            "get_parallel_state",
            "_size",
            "all_",
            "broadcast",
        ),
    )
    node_types = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.ClassDef):
            given = _forward_group_params(node)
            if not given:
                return
            for stmt in node.body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == "backward":
                    self._check(stmt, set(), backward_of=sorted(given)[0])
            return
        assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        params = distlife.group_params(node)
        if not params or _rebinds_from_state(node, params):
            return
        self._check(node, params, backward_of=None)

    def _check(
        self, func: ast.FunctionDef | ast.AsyncFunctionDef, params: set[str], backward_of: str | None
    ) -> None:
        getters = distlife.state_getters(func, self.ctx.imports)
        state_names = distlife.state_locals(func, getters)
        # a local taken from the given group (sp_group = ... if group is None else group) counts as the group
        held = set(params)
        for sub in ast.walk(func):
            if isinstance(sub, ast.Assign) and _is_group_value(sub.value, params):
                held.update(t.id for t in sub.targets if isinstance(t, ast.Name))
        reported: set[int] = set()
        self._group_collective = any(
            distlife.dist_call(c) in distlife.GROUP_INDEX
            and distlife.default_group_collective(c) is None
            and any(
                isinstance(n, ast.Name) and n.id in held
                for a in [*c.args, *(k.value for k in c.keywords)]
                for n in ast.walk(a)
            )
            for c in ast.walk(func)
            if isinstance(c, ast.Call)
        )
        self._scan(func.body, func, held, (state_names, getters), backward_of, reported)

    def _scan(
        self,
        stmts: list[ast.stmt],
        func: ast.AST,
        held: set[str],
        state_names: tuple[set[str], set[str]],
        backward_of: str | None,
        reported: set[int],
    ) -> None:
        for stmt in stmts:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(stmt, ast.If) and held:
                # the fallback for a missing group may read the ambient state; the other branch may not
                side = distlife.fallback_branch(stmt.test, held)
                if side:
                    kept = stmt.orelse if side == "body" else stmt.body
                    self._scan(kept, func, held, state_names, backward_of, reported)
                    continue
            todo: list[ast.AST] = [stmt]
            while todo:
                node = todo.pop()
                if isinstance(node, ast.IfExp) and held:
                    side = distlife.fallback_branch(node.test, held)
                    if side:
                        todo.append(node.orelse if side == "body" else node.body)
                        continue
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                    continue
                if isinstance(node, ast.Call) and _LOGGING.match(call_name(node) or ""):
                    continue
                what = distlife.ambient_read(node, *state_names)
                if what is None and held and not backward_of and not self._group_collective:
                    # (a function that runs some collectives on its group and others on the default one chose
                    # each group deliberately: only a function whose group reaches no collective is reported)
                    coll = distlife.default_group_collective(node)
                    if coll:
                        what = f"`dist.{coll}` without a group (it runs on the whole job's default group)"
                if what and node.lineno not in reported:
                    reported.add(node.lineno)
                    self._report(node, what, func, held, backward_of)
                    continue
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and (node.args or node.keywords)
                ):
                    # a state method given an argument (`state.extra_parallel_rank(group)`): not a field read
                    todo.extend(node.args)
                    todo.extend(kw.value for kw in node.keywords)
                    todo.append(node.func.value)
                    continue
                todo.extend(ast.iter_child_nodes(node))

    def _report(
        self, node: ast.AST, what: str, func: ast.AST, held: set[str], backward_of: str | None
    ) -> None:
        name = getattr(func, "name", "?")
        if backward_of:
            self.report(
                node,
                f"`{name}` reads {what}, but the forward was given `{backward_of}`: the backward runs outside "
                "the forward's parallel-state context, so the size/rank can belong to another group; store the "
                "forward group's size/rank on `ctx` and read it here",
            )
            return
        shown = ", ".join(f"`{g}`" for g in sorted(held))
        self.report(
            node,
            f"`{name}` holds the process group {shown} but reads {what}: with a module-owned or injected group "
            "the size/rank describes other ranks; read it from the group its collectives run on, once resolved "
            "(a parameter left `None` stands for the default group): `dist.get_world_size(<that group>)`, "
            "`dist.get_rank(<that group>)`",
        )
