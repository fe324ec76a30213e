"""NPU620 rank-identity-mismatch."""

from __future__ import annotations

import ast
import re

from npu_lint.core.astutil import call_name, last_name
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni import distlife

_LOCAL_NAME = re.compile(r"^(is_)?local_rank_?(0|zero)?$|^local_rank$")
_GLOBAL_NAME = re.compile(r"^(is_)?(global_)?rank_?(0|zero)$|^global_rank$|^is_global_rank_?0$")
_TWO_ARGS = {"get_global_rank": 2, "get_group_rank": 2}
_PATH_CALLS = frozenset({"join", "open", "save", "load", "Path", "makedirs", "exists"})
_DEVICE_WORDS = re.compile(r"device|cuda|npu|accelerator")


def _name_identity(name: str) -> str | None:
    low = name.lower()
    if _LOCAL_NAME.match(low):
        return distlife.LOCAL
    if _GLOBAL_NAME.match(low):
        return distlife.GLOBAL
    return None


def _derived(value: ast.AST) -> bool:
    """``rank % devices_per_node`` or a ``device_count()`` division: a local rank computed from the global one."""
    for sub in ast.walk(value):
        if isinstance(sub, ast.BinOp) and isinstance(sub.op, (ast.Mod, ast.FloorDiv)):
            return True
        if isinstance(sub, ast.Call) and call_name(sub) in ("device_count", "get_local_rank", "local_rank"):
            return True
    return False


class RankIdentityMismatch(Rule):
    code = "NPU620"
    name = "rank-identity-mismatch"
    summary = (
        "A per-node rank is taken from a per-job one or the reverse: a local rank (or `is_local_rank0` flag, a "
        "device index) computed from the global rank, a per-rank file in a shared checkpoint named by the local "
        "rank, or `dist.get_global_rank()` / `get_group_rank()` called without its group and rank."
    )
    why = (
        "A multi-node job has three rank identities: the global rank (unique in the job: `RANK`, "
        "`dist.get_rank()`), the local rank (unique on one node only: `LOCAL_RANK`), and a rank inside a process "
        "group. They coincide on one node, which is where migrations are tested, and differ from the second node "
        "on. A device index or a per-node duty (copying the resume tracker into the node's working directory) "
        "keyed by the global rank fails or is skipped on every node but the first: `set_device` gets an index "
        "beyond the node's devices, the other nodes resume from step 0 and the ranks load different checkpoints. "
        "A per-rank file in a shared checkpoint directory named by the local rank is overwritten by the same "
        "local rank of every other node. `torch.distributed.get_global_rank(group, group_rank)` and "
        "`get_group_rank(group, global_rank)` translate between a group and the job and need both arguments; "
        "called without them they raise TypeError on every rank. A local rank computed from the global one "
        "(`rank % devices_per_node`) is not reported."
    )
    bad = (
        Example(
            """
            import os

            import torch.distributed as dist


            class ToyLauncher:
                def __init__(self):
                    self.local_rank = int(os.environ.get("RANK", "0"))


            def resume_flag(args):
                return find_tracker(args.output_dir, is_local_rank0=args.global_rank == 0)


            def owns_meta():
                return dist.get_global_rank() == 0
            """,
            path="veomni/trainer/toy_launch.py",
            title="a local rank read from RANK; a per-node flag from the global rank; get_global_rank without arguments",
        ),
        Example(
            """
            import os

            import torch


            def save_rank_state(ckpt_dir, state, local_rank):
                torch.save(state, os.path.join(ckpt_dir, f"rng_rank_{local_rank}.pt"))


            def pick_device(args):
                return torch.device(f"npu:{args.global_rank}")
            """,
            path="veomni/checkpoint/toy_state.py",
            title="a shared per-rank file named by the local rank; a device index from the global rank",
        ),
    )
    good = (
        Example(
            """
            import os

            import torch
            import torch.distributed as dist


            class ToyLauncher:
                def __init__(self):
                    self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
                    self.global_rank = int(os.environ.get("RANK", "0"))
                    self.node_local = dist.get_rank() % torch.cuda.device_count()


            def save_rank_state(ckpt_dir, state):
                torch.save(state, os.path.join(ckpt_dir, f"rng_rank_{dist.get_rank()}.pt"))


            def pick_device(args):
                return torch.device(f"npu:{args.local_rank}")


            def root_of(group):
                return dist.get_global_rank(group, 0)
            """,
            path="veomni/checkpoint/toy_state.py",
            title="each identity where it belongs",
        ),
    )
    fix_safety = "No fix: which rank is meant is the author's decision."
    requires = (
        (
            "local_rank", "LOCAL_RANK", "global_rank", "get_global_rank", "get_group_rank", "rank0", "rank_0",
            "get_rank()", '"RANK"', "'RANK'",
        ),
    )  # fmt: skip
    node_types = (ast.Assign, ast.AnnAssign, ast.Call, ast.JoinedStr)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node.value is None:
                return
            for target in targets:
                name = last_name(target)
                if name:
                    self._compare(node.value, name, node.value)
            return
        if isinstance(node, ast.JoinedStr):
            self._device_index(node)
            return
        assert isinstance(node, ast.Call)
        attr = node.func.attr if isinstance(node.func, ast.Attribute) else None
        if attr in _TWO_ARGS and distlife.dist_call(node):
            given = len(node.args) + len(node.keywords)
            if (
                given < _TWO_ARGS[attr]
                and not any(isinstance(a, ast.Starred) for a in node.args)
                and not any(kw.arg is None for kw in node.keywords)
            ):
                self.report(
                    node,
                    f"`{self.ctx.source.segment(node)}`: torch.distributed.{attr} translates a rank between a group "
                    "and the job and needs (group, rank); without them it raises TypeError on every rank. The "
                    "global rank is `dist.get_rank()` (or the rank the caller already holds)",
                )
            return
        for kw in node.keywords:
            if kw.arg:
                self._compare(kw.value, kw.arg, kw.value)
        if (
            call_name(node) == "device"
            and len(node.args) == 2
            and distlife.dotted(node.func) == "torch.device"
        ):
            if distlife.identity(node.args[1]) == distlife.GLOBAL and not _derived(node.args[1]):
                self._report_device(node.args[1])
        if call_name(node) == "set_device" and node.args:
            if distlife.identity(node.args[0]) == distlife.GLOBAL and not _derived(node.args[0]):
                self._report_device(node.args[0])
        if call_name(node) == "format" and isinstance(node.func, ast.Attribute):
            self._local_file(node, [*node.args, *(kw.value for kw in node.keywords)])

    def _compare(self, value: ast.AST, name: str, where: ast.AST) -> None:
        want = _name_identity(name)
        if want is None or _derived(value):
            return
        found = distlife.identities_in(value)
        if want == distlife.LOCAL and distlife.GLOBAL in found and distlife.LOCAL not in found:
            self.report(
                where,
                f"`{name}` is a per-node identity but gets `{self.ctx.source.segment(value)}`, the global rank: "
                "it equals the local rank on the first node only; on the other nodes the per-node duty is skipped "
                "(or a device index overflows). Use the local rank (`LOCAL_RANK`)",
            )
        elif want == distlife.GLOBAL and distlife.LOCAL in found and distlife.GLOBAL not in found:
            self.report(
                where,
                f"`{name}` is a per-job identity but gets `{self.ctx.source.segment(value)}`, the local rank: one "
                "rank per node passes it, so the job-wide duty runs once per node. Use the global rank (`RANK`, "
                "`dist.get_rank()`)",
            )

    def _device_index(self, node: ast.JoinedStr) -> None:
        values = node.values
        for i, part in enumerate(values):
            if not isinstance(part, ast.FormattedValue) or i == 0:
                continue
            before = values[i - 1]
            if not (
                isinstance(before, ast.Constant)
                and isinstance(before.value, str)
                and before.value.endswith(":")
            ):
                continue
            head = values[i - 2] if i >= 2 else None
            text = before.value.lower()
            if head is not None and isinstance(head, ast.FormattedValue):
                text += ast.unparse(head.value).lower()
            if not _DEVICE_WORDS.search(text):
                continue
            if distlife.identity(part.value) == distlife.GLOBAL and not _derived(part.value):
                self._report_device(part.value)
        parent = self.ctx.parents[-1] if self.ctx.parents else None
        if isinstance(parent, ast.Call) and call_name(parent) in _PATH_CALLS:
            self._local_file(
                node, [p.value for p in values if isinstance(p, ast.FormattedValue)], fstring=True
            )

    def _module_string(self, name: str) -> str:
        """The value of a module-level string constant ``name`` (``_FORMAT = "state_rank_{}.pt"``), or ""."""
        for stmt in self.ctx.tree.body:
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant):
                if any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
                    return stmt.value.value if isinstance(stmt.value.value, str) else ""
        return ""

    def _report_device(self, value: ast.AST) -> None:
        self.report(
            value,
            f"device index `{self.ctx.source.segment(value)}` is the global rank: a node has only its own devices "
            "(index = local rank), so every node but the first asks for a device that does not exist",
        )

    def _local_file(self, node: ast.AST, parts: list[ast.AST], fstring: bool = False) -> None:
        if not fstring:
            template = (
                node.func.value
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                else None
            )
            text = ""
            if isinstance(template, ast.Constant) and isinstance(template.value, str):
                text = template.value
            elif isinstance(template, ast.Name):
                text = self._module_string(template.id)
            if "rank" not in text.lower():
                return
        else:
            assert isinstance(node, ast.JoinedStr)
            text = "".join(
                p.value for p in node.values if isinstance(p, ast.Constant) and isinstance(p.value, str)
            )
            if "rank" not in text.lower():
                return
        found: set[str] = set()
        for part in parts:
            found |= distlife.identities_in(part)
        if distlife.LOCAL in found and distlife.GLOBAL not in found and distlife.GROUP not in found:
            self.report(
                node,
                "a per-rank file name carries the local rank: in a directory shared by the nodes (a checkpoint), "
                "the same local rank of every node writes the same file and the last one wins; name it by the "
                "global rank",
            )
