"""NPU622 checkpoint-save-lifecycle."""

from __future__ import annotations

import ast
import re

from npu_lint.core.astutil import call_name, keyword_arg, nodes_of
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni import distlife

# a save that writes through collectives on the default group (a distributed HF/LoRA export, DCP itself)
_DIST_SAVE = re.compile(r"^_?save_\w*(safetensor|dcp|adapter|hf_|distributed)\w*$")
_RELEASE = re.compile(r"empty_cache$")
_CPU_BACKEND = re.compile(r"gloo|cpu")


def _calls(node: ast.AST) -> list[ast.Call]:
    return nodes_of(node, ast.Call)  # type: ignore[return-value]


def _starts_async(call: ast.Call, starters: set[str], bare: dict[str, str] | None = None) -> bool:
    """A call that may leave an async DCP save running: ``dcp.async_save``, ``x.save(..., save_async=...)``, or a
    function of this file that does (``super()._save_checkpoint(state)``)."""
    if distlife.save_kind(call, bare) == "async_save":
        return True
    flag = keyword_arg(call, "save_async")
    if flag is not None and not (isinstance(flag, ast.Constant) and not flag.value):
        return True
    return call_name(call) in starters


def _is_checkpoint_save(call: ast.Call, bare: dict[str, str] | None = None) -> bool:
    if distlife.save_kind(call, bare):
        return True
    func = call.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "save"
        and "checkpointer" in distlife.dotted(func).lower()
    )


class CheckpointSaveLifecycle(Rule):
    code = "NPU622"
    name = "checkpoint-save-lifecycle"
    summary = (
        "A DCP checkpoint save breaks its lifecycle: an async save started without draining the previous one or "
        "on the training process group (no dedicated Gloo group), another distributed save started while an "
        "async save may be pending, a synchronous save not followed by a barrier, or a training-loop save "
        "without the device-memory release its own cleanup shows is needed."
    )
    why = (
        "`dcp.async_save` returns after staging and keeps running planning collectives in a background thread. "
        "If that thread uses the training process group (HCCL/NCCL), its collectives interleave with the FSDP "
        "collectives the main thread issues for the next steps: ranks match different operations and the job "
        "hangs or corrupts the exchange; VeOmni gives async saves a dedicated Gloo group, which must really be "
        'a CPU group (`new_group(backend="gloo")`, not the default backend). A new async save, or any other '
        "distributed save (the HF safetensors export, a LoRA adapter's DCP save), must first wait for the pending "
        "one (the tree's `wait_for_pending_save()`, the future's `.result()`): otherwise two saves run "
        "collectives at once, or the export reads weights the pending save is still staging. A synchronous "
        "`dcp.save` returns on each rank as soon as its own writes finish: a barrier must follow before ranks "
        "return to training collectives or before one rank consolidates the files the others wrote. A "
        "training-loop save whose function frees the device cache after the save but not before it lets DCP's "
        "collective buffers compete with the step's cached activations (out-of-memory inside the save on large "
        "MoE/VL jobs); and a checkpointer's synchronous path that leaves the staged memory unreleased (no "
        "`empty_cache()` after it, while its async path is drained) makes the next steps OOM."
    )
    bad = (
        Example(
            """
            import torch.distributed as dist
            import torch.distributed.checkpoint as dcp


            class ToyCkpt:
                pending = None

                @classmethod
                def save(cls, state, writer, use_async):
                    if use_async:
                        cls.pending = dcp.async_save(state, storage_writer=writer)
                    else:
                        dcp.save(state, storage_writer=writer)
            """,
            path="veomni/checkpoint/toy_ckpt.py",
            title="async save on the training group, no drain; sync save with no barrier",
        ),
        Example(
            """
            from veomni.utils.save_safetensor_utils import save_hf_safetensor


            class ToyCkptCallback:
                def _save_checkpoint(self, state):
                    self.trainer.checkpointer.save(self.path, state, save_async=self.args.save_async)
                    self.trainer.checkpointer.barrier()


            class ToyHfCallback(ToyCkptCallback):
                def _save_checkpoint(self, state):
                    super()._save_checkpoint(state)
                    save_hf_safetensor(self.path, model=self.trainer.model)
            """,
            path="veomni/trainer/callbacks/toy_callback.py",
            title="an HF export right after a save that may still be running asynchronously",
        ),
    )
    good = (
        Example(
            """
            import torch.distributed as dist
            import torch.distributed.checkpoint as dcp

            from veomni.utils.device import empty_cache


            class ToyCkpt:
                pending = None
                group = None

                @classmethod
                def drain(cls):
                    if cls.pending is not None:
                        cls.pending.result()
                        cls.pending = None

                @classmethod
                def save(cls, state, writer, use_async):
                    if use_async:
                        if cls.group is None:
                            cls.group = dist.new_group(backend="gloo")
                        cls.drain()
                        cls.pending = dcp.async_save(state, storage_writer=writer, process_group=cls.group)
                    else:
                        dcp.save(state, storage_writer=writer)
                        dist.barrier()
                        empty_cache()
            """,
            path="veomni/checkpoint/toy_ckpt.py",
            title="drained, on a Gloo group; barrier and release after the synchronous save",
        ),
    )
    fix_safety = "No fix: the drain, group and barrier belong to the checkpointer's design."
    requires = (
        ("async_save", "dcp", "checkpointer", "save_async", "Checkpointer", "distributed.checkpoint"),
        "save",
    )
    node_types = (ast.Module,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Module)
        self._bare = distlife.dcp_names(self.ctx.imports)
        funcs = nodes_of(node, ast.FunctionDef, ast.AsyncFunctionDef)
        # functions of this file that may leave an async save running, and that run a distributed save
        starters: set[str] = set()
        savers: set[str] = set()
        for _ in range(2):  # one level of helpers calling helpers
            for func in funcs:
                calls = _calls(func)
                if any(_starts_async(c, starters, self._bare) for c in calls):
                    starters.add(func.name)
                if any(distlife.save_kind(c, self._bare) == "save" or call_name(c) in savers for c in calls):
                    savers.add(func.name)
        async_groups: dict[str, ast.Call] = {}
        for func in funcs:
            for call in _calls(func):
                if distlife.save_kind(call, self._bare) == "async_save":
                    group = keyword_arg(call, "process_group")
                    if group is None or (isinstance(group, ast.Constant) and group.value is None):
                        self.report(
                            call,
                            "`dcp.async_save` without `process_group=`: its background thread runs the save's "
                            "collectives on the default (training) group while the main thread's FSDP collectives "
                            'use it too; give async saves a dedicated `dist.new_group(backend="gloo")`',
                        )
                    else:
                        async_groups[distlife.dotted(group) or ast.dump(group)] = call
                    if any(isinstance(st, ast.Expr) and st.value is call for st in ast.walk(func)):
                        self.report(
                            call,
                            "the future of `dcp.async_save` is dropped: nothing can wait for the save before the "
                            "next one, an HF export or the end of training (the process may exit mid-write); keep "
                            "it and drain it (`.result()`) first",
                        )
        # the file's own drains: functions that wait on a future (`cls.pending.result()`)
        drainers = {
            f.name
            for f in funcs
            if any(
                isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "result"
                for c in ast.walk(f)
            )
        }
        for func in funcs:
            self._function(func, starters, savers, async_groups, drainers)

    def _function(
        self,
        func: ast.FunctionDef | ast.AsyncFunctionDef,
        starters: set[str],
        savers: set[str],
        async_groups: dict[str, ast.Call],
        drainers: set[str],
    ) -> None:
        inner = _nested_calls(func)
        calls = sorted(
            (c for c in _calls(func) if id(c) not in inner), key=lambda c: (c.lineno, c.col_offset)
        )
        drains = [c for c in calls if distlife.drains(c) or call_name(c) in drainers]
        releases = [c for c in calls if _RELEASE.search(call_name(c) or "")]
        barriers = [c for c in calls if distlife.is_barrier(c) or call_name(c) == "barrier"]
        has_async = any(distlife.save_kind(c, self._bare) == "async_save" for c in calls)
        rank_tests = [
            n.lineno for n in ast.walk(func) if isinstance(n, ast.If) and distlife.rank_test(n.test)
        ]
        for call in calls:
            # a dedicated group for async saves created on the device backend
            if distlife.dist_call(call, "new_group"):
                backend = keyword_arg(call, "backend")
                parent = self._assigned_to(func, call)
                if (
                    parent
                    and parent in async_groups
                    and not (
                        isinstance(backend, ast.Constant)
                        and isinstance(backend.value, str)
                        and _CPU_BACKEND.search(backend.value)
                    )
                ):
                    self.report(
                        call,
                        f"`{parent}` is the process group of the async DCP save but is created on the default "
                        "(device) backend: the background save still issues HCCL/NCCL collectives concurrently with "
                        'training; create it with `backend="gloo"`',
                    )
            kind = distlife.save_kind(call, self._bare)
            if kind == "async_save" and not any(d.lineno < call.lineno for d in drains):
                self.report(
                    call,
                    "a new async DCP save starts without waiting for the previous one (no "
                    "`wait_for_pending_save()` / `.result()` before it): two saves run collectives at once and the "
                    "old future is dropped with its errors",
                )
            if kind == "save" or (_is_checkpoint_save(call, self._bare) and kind is None):
                # the barrier must come before the ranks part ways again (a rank test) or the function ends
                fence = min((t for t in rank_tests if t > call.lineno), default=10**9)
                after = [b for b in barriers if call.lineno < b.lineno < fence]
                if not after:
                    # reported where the save's cleanup is (the barrier belongs next to it), else at the save
                    cleanup = [r for r in releases if call.lineno < r.lineno < fence]
                    self.report(
                        cleanup[0] if cleanup else call,
                        f"synchronous `{self.ctx.source.segment(call.func)}` (line {call.lineno}) with no barrier "
                        "after it"
                        + (f" before the rank test on line {fence}" if fence < 10**9 else "")
                        + ": each rank returns as soon as its own writes finish and goes on (to training "
                        "collectives, or to consolidating files other ranks are still writing); add "
                        "`dist.barrier()` after the save",
                    )
                elif kind == "save" and has_async and not any(r.lineno > call.lineno for r in releases):
                    self.report(
                        after[-1],
                        "the synchronous path of this checkpointer does not release the device memory DCP staged "
                        "(no `empty_cache()` after the save): the first training steps after each checkpoint run "
                        "short of memory",
                    )
            if _is_checkpoint_save(call, self._bare) and kind is None:
                before = [r for r in releases if r.lineno < call.lineno]
                later = [r for r in releases if r.lineno > call.lineno]
                if later and not before:
                    self.report(
                        call,
                        "this checkpoint save releases the device cache after the save but not before it: DCP "
                        "allocates its collective buffers while the step's cached blocks still hold the memory "
                        "(out-of-memory inside the save); call `empty_cache()` before the save too",
                    )
        # another distributed save while an async save may be pending
        started = [c for c in calls if _starts_async(c, starters, self._bare)]
        branches = _branch_sides(func) if started else {}
        for start in started:
            for call in calls:
                if call.lineno <= start.lineno or call is start:
                    continue
                if not (
                    _DIST_SAVE.match(call_name(call) or "") or distlife.save_kind(call, self._bare) == "save"
                ):
                    continue
                if _exclusive(branches, start, call):
                    continue
                if any(start.lineno < d.lineno <= call.lineno for d in drains):
                    break
                self.report(
                    start,
                    f"`{self.ctx.source.segment(start.func)}` may leave an async DCP save running, and "
                    f"`{call_name(call)}` (line {call.lineno}) starts another distributed save with no drain in "
                    "between: the two run collectives at once or the export reads weights still being staged; "
                    "call the checkpointer's `wait_for_pending_save()` first",
                )
                break
            else:
                continue
            break
        # a function that knows about the async checkpointer and runs a distributed save without draining it
        if not drains and self._knows_async_checkpointer(func):
            for stmt in func.body:
                if any(
                    call_name(c) in savers or distlife.save_kind(c, self._bare) == "save"
                    for c in _calls(stmt)
                ):
                    self.report(
                        stmt,
                        f"`{func.name}` runs a distributed save (through the DCP checkpointer's world) without "
                        "waiting for a pending async DCP save: call `wait_for_pending_save()` before it",
                    )
                    break

    def _knows_async_checkpointer(self, func: ast.AST) -> bool:
        for sub in ast.walk(func):
            if isinstance(sub, ast.ImportFrom):
                if any(a.name.endswith("Checkpointer") for a in sub.names):
                    return True
        return False

    def _assigned_to(self, func: ast.AST, call: ast.Call) -> str | None:
        for sub in ast.walk(func):
            if isinstance(sub, ast.Assign) and sub.value is call and len(sub.targets) == 1:
                return distlife.dotted(sub.targets[0]) or None
        return None


def _branch_sides(func: ast.AST) -> dict[int, set[tuple[int, str]]]:
    """For each call: the (if-statement id, side) pairs it sits under."""
    out: dict[int, set[tuple[int, str]]] = {}
    for node in ast.walk(func):
        if isinstance(node, ast.If):
            for side in ("body", "orelse"):
                for stmt in getattr(node, side):
                    for sub in ast.walk(stmt):
                        if isinstance(sub, ast.Call):
                            out.setdefault(id(sub), set()).add((id(node), side))
    return out


def _exclusive(branches: dict[int, set[tuple[int, str]]], a: ast.Call, b: ast.Call) -> bool:
    """Whether ``a`` and ``b`` sit on opposite branches of one ``if`` (never both run)."""
    sides_a = branches.get(id(a), set())
    sides_b = branches.get(id(b), set())
    return any((if_id, "orelse" if side == "body" else "body") in sides_b for if_id, side in sides_a)


def _nested_calls(func: ast.AST) -> set[int]:
    """Ids of the calls inside functions nested in ``func`` (they run when those are called, not here)."""
    out: set[int] = set()
    for sub in nodes_of(func, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda):
        if sub is not func:
            out.update(id(n) for n in nodes_of(sub, ast.Call))
    return out
