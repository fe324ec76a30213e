"""NPU617 collective-bucket-dtype."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import call_name
from npu_lint.core.astutil import walk as _walk
from npu_lint.rules.base import Context, Example, Rule

_COLLECTIVES = frozenset(
    {
        "all_to_all",
        "all_to_all_single",
        "all_gather",
        "all_gather_into_tensor",
        "all_gather_coalesced",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "all_reduce",
        "all_reduce_coalesced",
        "broadcast",
        "broadcast_coalesced",
        "_flatten_dense_tensors",
    }
)
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _mentions_dtype(node: ast.AST) -> bool:
    return any(
        (isinstance(n, ast.Attribute) and "dtype" in n.attr) or (isinstance(n, ast.Name) and "dtype" in n.id)
        for n in _walk(node)
    )


class CollectiveBucketDtype(Rule):
    code = "NPU617"
    name = "collective-bucket-dtype"
    summary = (
        "Tensors are grouped into buckets for one collective (an all-to-all, all-gather or reduce of the "
        "whole bucket) under a key that does not include their dtype, so fp32 and bf16 tensors share one "
        "collective."
    )
    why = (
        "A bucketed collective (an owner-based all-to-all of optimizer updates, a coalesced all-reduce of "
        "gradients, a flattened broadcast) sends the bucket's tensors in one call whose send and receive "
        "buffers share one dtype. Models keep some parameters out of mixed precision (an MoE router or a norm "
        "in fp32) next to bf16 ones, so a bucket keyed only by mesh, device or size mixes dtypes: the "
        "collective raises, or a buffer allocated in the first tensor's dtype silently casts the others "
        "(fp32 updates truncated to bf16). HCCL is stricter than NCCL about mixed-dtype lists. Key the buckets "
        "by dtype as well. The check finds `buckets.setdefault(key, [])` (or `defaultdict` `buckets[key].append`) groupings "
        "whose buckets reach a function of the same file that issues a collective, and reads the key "
        "(through a local and through a helper of the file that builds it) for a dtype."
    )
    bad = (
        Example(
            """
            import torch
            import torch.distributed as dist


            class ToyShardedOpt:
                def _exchange(self, group_items, group):
                    send = [u.contiguous() for _, u in group_items]
                    recv = [torch.empty_like(u) for u in send]
                    dist.all_to_all(recv, send, group=group)
                    return recv

                def step(self, params):
                    buckets = {}
                    for p in params:
                        upd = p.grad
                        bucket_key = (upd.device, upd.shape[1])
                        buckets.setdefault(bucket_key, []).append((p, upd))
                    for (_device, _cols), items in buckets.items():
                        self._exchange(items, self.group)
            """,
            path="veomni/optim/toy_sharded.py",
            title="updates bucketed by device and width for one all-to-all",
        ),
    )
    good = (
        Example(
            """
            import torch
            import torch.distributed as dist


            def _bucket_key(upd):
                return upd.device, upd.dtype


            class ToyShardedOpt:
                def _exchange(self, group_items, group):
                    send = [u.contiguous() for _, u in group_items]
                    recv = [torch.empty_like(u) for u in send]
                    dist.all_to_all(recv, send, group=group)
                    return recv

                def step(self, params):
                    buckets = {}
                    for p in params:
                        key = _bucket_key(p.grad)
                        entries = buckets.setdefault(key, [])
                        entries.append((p, p.grad))
                    for _key, items in buckets.items():
                        self._exchange(items, self.group)
            """,
            path="veomni/optim/toy_sharded.py",
            title="the key carries the dtype (through a helper)",
        ),
    )
    fix_safety = "No fix: the dtype joins the key and every reader of the key."
    requires = (
        ("setdefault", "defaultdict"),
        ("all_to_all", "all_gather", "reduce_scatter", "all_reduce", "broadcast"),
    )
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def finish(self) -> None:
        tree = self.ctx.tree
        funcs: dict[str, ast.AST] = {}
        for n in _walk(tree):
            if isinstance(n, _FUNCS):
                funcs.setdefault(n.name, n)
        communicating = {
            name
            for name, f in funcs.items()
            if any(isinstance(c, ast.Call) and call_name(c) in _COLLECTIVES for c in _walk(f))
        }
        for _ in range(3):  # and the functions that call them (a flush calling an exchange helper)
            more = {
                name
                for name, f in funcs.items()
                if name not in communicating
                and any(isinstance(c, ast.Call) and call_name(c) in communicating for c in _walk(f))
            }
            if not more:
                break
            communicating |= more
        if not communicating:
            return
        for func in funcs.values():
            self._check(func, funcs, communicating)

    def _check(self, func: ast.AST, funcs: dict[str, ast.AST], communicating: set[str]) -> None:
        groupings: list[tuple[ast.Call, str]] = []  # (setdefault call, dict name)
        for n in _walk(func):
            if (
                isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and n.func.attr == "setdefault"
                and isinstance(n.func.value, ast.Name)
                and len(n.args) == 2
                and isinstance(n.args[1], ast.List)
            ):
                groupings.append((n, n.func.value.id))
        defaults = {
            t.id
            for n in _walk(func)
            if isinstance(n, ast.Assign)
            and isinstance(n.value, ast.Call)
            and call_name(n.value) == "defaultdict"
            for t in n.targets
            if isinstance(t, ast.Name)
        }
        for n in _walk(func):
            # `buckets[key].append(x)` on a `defaultdict(list)`
            if (
                defaults
                and isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and n.func.attr in ("append", "extend")
                and isinstance(n.func.value, ast.Subscript)
                and isinstance(n.func.value.value, ast.Name)
                and n.func.value.value.id in defaults
            ):
                groupings.append((n, n.func.value.value.id))
        if not groupings:
            return
        for call, buckets in groupings:
            if not self._reaches_collective(func, buckets, call, funcs, communicating):
                continue
            key = call.args[0] if call_name(call) == "setdefault" else call.func.value.slice  # type: ignore[attr-defined]
            if self._key_has_dtype(func, key, funcs):
                continue
            self.report(
                key,
                f"`{buckets}` groups tensors for one collective under `{ast.unparse(key)}`, a key without their "
                "dtype: fp32 and bf16 tensors land in one bucket whose send/receive buffers share one dtype "
                "(the collective fails, or casts silently); add the dtype to the key",
            )

    @staticmethod
    def _reaches_collective(
        func: ast.AST, buckets: str, grouping: ast.Call, funcs: dict[str, ast.AST], communicating: set[str]
    ) -> bool:
        """Whether the bucket lists (``buckets`` itself, its ``.items()``/``.values()``, or the list a
        ``setdefault`` returned) are handed to a function of the file that issues a collective."""
        carriers = {buckets}
        for n in _walk(func):
            if isinstance(n, ast.Assign) and any(
                isinstance(s, ast.Name) and s.id in carriers for s in _walk(n.value)
            ):
                carriers |= {t.id for tg in n.targets for t in _walk(tg) if isinstance(t, ast.Name)}
            elif isinstance(n, (ast.For, ast.comprehension)) and any(
                isinstance(s, ast.Name) and s.id == buckets for s in _walk(n.iter)
            ):
                carriers |= {t.id for t in _walk(n.target) if isinstance(t, ast.Name)}
        for n in _walk(func):
            if isinstance(n, ast.Call) and call_name(n) in communicating:
                values = [*n.args, *(k.value for k in n.keywords)]
                if any(isinstance(s, ast.Name) and s.id in carriers for v in values for s in _walk(v)):
                    return True
        return False

    @staticmethod
    def _key_has_dtype(func: ast.AST, key: ast.AST, funcs: dict[str, ast.AST]) -> bool:
        todo = [key]
        seen: set[int] = set()
        while todo:
            expr = todo.pop()
            if id(expr) in seen:
                continue
            seen.add(id(expr))
            if _mentions_dtype(expr):
                return True
            for n in _walk(expr):
                if isinstance(n, ast.Name):
                    for a in _walk(func):
                        if isinstance(a, ast.Assign) and any(
                            isinstance(t, ast.Name) and t.id == n.id for tg in a.targets for t in _walk(tg)
                        ):
                            todo.append(a.value)
                elif isinstance(n, ast.Call):
                    helper = funcs.get(call_name(n))
                    if helper is not None:
                        todo.extend(r.value for r in _walk(helper) if isinstance(r, ast.Return) and r.value)
        return False
