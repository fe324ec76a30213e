"""NPU621 rank-divergent-collective."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import call_name, nodes_of
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni import distlife

# calls that write their last positional argument (a path) / their path argument
_WRITES_LAST = frozenset(
    {"copy", "copyfile", "copy2", "copytree", "move", "save", "dump", "rename", "replace"}
)
_READS_FIRST = frozenset({"exists", "isfile", "isdir", "open", "load", "listdir", "getsize", "read_text"})


def _collectives(stmts: list[ast.stmt], helpers: frozenset[str] = frozenset()) -> list[tuple[ast.Call, str]]:
    """Collectives issued by ``stmts``: directly, or through a function of this file that always issues one."""
    out = []
    for stmt in stmts:
        for sub in ast.walk(stmt):
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                break
            name = distlife.collective(sub)
            if not name and isinstance(sub, ast.Call) and call_name(sub) in helpers:
                name = f"{call_name(sub)}()"
            if name:
                out.append((sub, name))  # type: ignore[arg-type]
    return out


def _always_collective(func: ast.AST) -> bool:
    """A function whose own top-level statements issue a collective on every call (not under an ``if``)."""
    for stmt in getattr(func, "body", []):
        if isinstance(stmt, ast.Expr) and distlife.collective(stmt.value):
            return True
    return False


def _written(stmts: list[ast.stmt]) -> set[str]:
    """Names of paths written in ``stmts`` (``copy(src, meta_file)``, ``torch.save(x, path)``, ``open(p, "w")``)."""
    out: set[str] = set()
    for stmt in stmts:
        for sub in ast.walk(stmt):
            if not isinstance(sub, ast.Call):
                continue
            name = call_name(sub)
            if name in _WRITES_LAST and len(sub.args) >= 2 and isinstance(sub.args[-1], ast.Name):
                out.add(sub.args[-1].id)
            elif name == "open" and len(sub.args) >= 2 and isinstance(sub.args[0], ast.Name):
                mode = sub.args[1]
                if (
                    isinstance(mode, ast.Constant)
                    and isinstance(mode.value, str)
                    and set(mode.value) & set("wax")
                ):
                    out.add(sub.args[0].id)
    return out


def _ends_early(stmts: list[ast.stmt]) -> bool:
    return bool(stmts) and isinstance(stmts[-1], (ast.Return, ast.Continue, ast.Break, ast.Raise))


class RankDivergentCollective(Rule):
    code = "NPU621"
    name = "rank-divergent-collective"
    summary = (
        "A collective (`barrier`, `all_reduce`, `broadcast`, `dcp.save`...) is reached only by the ranks that pass "
        "a rank test (`if is_rank0:`, after `if rank != 0: return`), or a file one rank writes under such a test "
        "is read by every rank with no barrier in between."
    )
    why = (
        "Every rank of a group must reach the same collectives in the same order. A barrier or reduction inside "
        "`if is_rank0:` (or after an early return of the other ranks) is entered by some ranks only: they wait "
        "forever for the others, or, if a later collective happens to match, the two sides exchange different "
        "data. On NPUs HCCL reports this as a timeout long after the fact, far from the cause. The converse "
        "hazard is a value produced on one rank and consumed by all: when rank 0 (or each node's local rank 0) "
        "copies a tracker or metadata file and every rank then reads it, the readers must wait at a barrier (or "
        "receive the value by broadcast) first, or the ranks that get there early read nothing and resume from a "
        "different step. A test whose else branch reaches the same collective is not reported."
    )
    bad = (
        Example(
            """
            import os
            import shutil

            import torch.distributed as dist


            def fetch_resume_step(out_dir, is_rank0):
                local = "resume_step.txt"
                if is_rank0:
                    shutil.copy(os.path.join(out_dir, "latest"), local)
                    dist.barrier()
                step = 0
                if os.path.exists(local):
                    step = int(open(local).read())
                return step
            """,
            path="veomni/utils/toy_resume.py",
            title="a barrier only rank 0 reaches; every rank reads what rank 0 wrote",
        ),
        Example(
            """
            import torch.distributed as dist


            def publish(metrics, rank):
                if rank != 0:
                    return
                dist.all_reduce(metrics)
            """,
            path="veomni/trainer/toy_metrics.py",
            title="an all-reduce after the other ranks returned",
        ),
    )
    good = (
        Example(
            """
            import os
            import shutil

            import torch.distributed as dist


            def fetch_resume_step(out_dir, is_rank0):
                local = "resume_step.txt"
                if is_rank0:
                    shutil.copy(os.path.join(out_dir, "latest"), local)
                dist.barrier()
                step = 0
                if os.path.exists(local):
                    step = int(open(local).read())
                return step
            """,
            path="veomni/utils/toy_resume.py",
            title="the barrier on every rank, before the read",
        ),
    )
    fix_safety = "No fix: move the collective out of the rank test (or add the barrier) by hand."
    requires = (
        ("rank", "main", "master", "chief"),
        ("barrier", "all_reduce", "broadcast", "all_gather", "dcp", "reduce", "scatter", "save"),
    )
    node_types = (ast.FunctionDef, ast.AsyncFunctionDef)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        # collectives that sit under two different rank tests of one function pair up (``main_process_first``:
        # the others wait before, the main rank after its work): every rank reaches one of them
        ranked = [i for i in nodes_of(node, ast.If) if distlife.rank_test(i.test)]  # type: ignore[attr-defined]
        if not ranked:
            return  # every check below starts at a rank test
        seen: dict[str, int] = {}
        for sub in ranked:
            assert isinstance(sub, ast.If)
            for name in {n for _, n in _collectives(sub.body) + _collectives(sub.orelse)}:  # direct only
                seen[name] = seen.get(name, 0) + 1
        self._paired = {name for name, count in seen.items() if count > 1}
        helpers = self.ctx.memo.get("npu621_helpers")
        if helpers is None:
            helpers = self.ctx.memo["npu621_helpers"] = frozenset(
                f.name  # type: ignore[attr-defined]
                for f in nodes_of(self.ctx.tree, ast.FunctionDef, ast.AsyncFunctionDef)
                if _always_collective(f)
            )
        self._helpers = helpers
        self._block(node.body, node)

    def _block(self, stmts: list[ast.stmt], func: ast.AST) -> None:
        for i, stmt in enumerate(stmts):
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(stmt, ast.If) and distlife.rank_test(stmt.test):
                self._rank_if(stmt, stmts[i + 1 :])
                continue
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(stmt, field, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                    self._block(inner, func)
            for handler in getattr(stmt, "handlers", []) or []:
                self._block(handler.body, func)

    def _rank_if(self, stmt: ast.If, rest: list[ast.stmt]) -> None:
        in_body = _collectives(stmt.body, self._helpers)  # type: ignore[arg-type]
        in_else = _collectives(stmt.orelse, self._helpers)  # type: ignore[arg-type]
        body_names = {n for _, n in in_body}
        else_names = {n for _, n in in_else}
        for call, name in in_body:
            if name not in else_names and name not in self._paired:
                self._report_branch(call, name, stmt)
        for call, name in in_else:
            if name not in body_names and name not in self._paired:
                self._report_branch(call, name, stmt)
        # the ranks that fail the test leave (return/continue): what follows is reached by the others only
        for branch in (stmt.body, stmt.orelse):
            if _ends_early(branch) and not _collectives(branch):
                later = _collectives(rest)
                if later:
                    call, name = later[0]
                    self.report(
                        call,
                        f"`{name}` is reached only by the ranks that did not leave at the rank test on line "
                        f"{stmt.lineno} (`{self.ctx.source.segment(stmt.test)}`): the others never join it and the "
                        "job hangs",
                    )
                break
        # a file written under the rank test, read by every rank afterwards without a barrier in between
        written = _written(stmt.body)
        if not written:
            return
        for later in rest:
            if _collectives([later]):
                return
            for sub in ast.walk(later):
                if (
                    isinstance(sub, ast.Call)
                    and call_name(sub) in _READS_FIRST
                    and sub.args
                    and isinstance(sub.args[0], ast.Name)
                    and sub.args[0].id in written
                ):
                    self.report(
                        sub,
                        f"`{sub.args[0].id}` is written only by the ranks that pass `"
                        f"{self.ctx.source.segment(stmt.test)}` (line {stmt.lineno}) and read here by every rank "
                        "with no barrier in between: ranks that arrive first find no file (or a partial one) and "
                        "diverge; put a `dist.barrier()` (or a broadcast of the value) before the read",
                    )
                    return

    def _report_branch(self, call: ast.Call, name: str, stmt: ast.If) -> None:
        self.report(
            call,
            f"`{name}` runs inside the rank test `{self.ctx.source.segment(stmt.test)}` (line {stmt.lineno}) "
            "with no matching call on the other branch: only some ranks reach the collective and the job hangs "
            "(HCCL/NCCL timeout); move it out of the test so every rank reaches it",
        )
