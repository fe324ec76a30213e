"""NPU614 grad-norm-reduce-group."""

from __future__ import annotations

import ast
import re

from npu_lint.rules.base import Context, Example, Rule

_GRAD_NORM_FUNC = re.compile(r"grad_norm|clip_grad|grads?_clip")
# groups that span the replicas under HSDP (replicate x shard): the same gradient shard is counted once per replica
_WHOLE_DP = frozenset({"fsdp_group", "dp_group", "data_parallel_group"})
_SHARD_ONLY = frozenset({"dp_shard_group"})
_SP_WORD = re.compile(r"(^|_)(sp|ulysses|sequence|cp|context)(_|$)")


def _words(func: ast.AST) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(func):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.add(node.value)
    return out


class GradNormReduceGroup(Rule):
    code = "NPU614"
    name = "grad-norm-reduce-group"
    summary = (
        "A gradient-norm reduction reduces over a group that is not the one the parameters are sharded over: "
        "the whole data-parallel group under HSDP (replicas counted again), or the FSDP shard group without the "
        "sequence-parallel ranks folded into it."
    )
    why = (
        "With FSDP2 each rank holds a shard of every gradient; the global norm is the p-th root of the sum of "
        "every shard's p-th power, reduced over exactly the ranks that hold distinct shards. Under HSDP the "
        "replicas hold identical shards: reducing over the FSDP group (replicate x shard) counts each shard once "
        "per replica and inflates the norm by sqrt(replicas), so every step is clipped too hard. When sequence "
        "parallelism is folded into FSDP sharding (parameters sharded over dp_shard x sp), reducing over the "
        "data-parallel shard group alone misses the sequence-parallel shards: each rank computes a different, "
        "too small norm and the clip coefficients diverge across ranks. In a grad-norm function (its name says "
        "`grad_norm`/`clip_grad`), the whole data-parallel group (`fsdp_group`, `dp_group`) is reported when "
        "nothing in the function tells HSDP apart (no `replicate` test), and `dp_shard_group` when nothing in "
        "it considers sequence parallelism (`dp_shard_sp`, `sp_enabled`...)."
    )
    bad = (
        Example(
            """
            import torch
            import torch.distributed as dist

            from veomni.distributed.parallel_state import get_parallel_state


            def offload_clip_grad_norm(model, max_norm, norm_type=2.0):
                state = get_parallel_state()
                grads = [p.grad for p in model.parameters() if p.grad is not None]
                total = sum(g.float().norm(norm_type) ** norm_type for g in grads)
                dist.all_reduce(total, group=state.fsdp_group)
                total = total ** (1.0 / norm_type)
                torch.nn.utils.clip_grads_with_norm_(model.parameters(), max_norm, total)
                return total
            """,
            path="veomni/distributed/toy_clip.py",
            title="the whole FSDP group (replicas included under HSDP)",
        ),
        Example(
            """
            def grad_norm_groups(state):
                if not state.dp_replicate_enabled:
                    return [state.fsdp_group]
                return [state.dp_shard_group] if state.dp_shard_size > 1 else []
            """,
            path="veomni/distributed/fsdp2/toy_norm.py",
            title="the shard group under HSDP, sequence-parallel shards forgotten",
        ),
    )
    good = (
        Example(
            """
            def grad_norm_groups(state):
                if not state.dp_replicate_enabled:
                    return [state.fsdp_group]
                if state.dp_shard_sp_enabled:
                    return [state.dp_shard_sp_group]
                return [state.dp_shard_group] if state.dp_shard_size > 1 else []


            def log_step(state, loss):
                return loss.detach().clone(), state.dp_group
            """,
            path="veomni/distributed/fsdp2/toy_norm.py",
            title="replicas and sequence-parallel shards both handled; not a grad-norm function",
        ),
    )
    fix_safety = "No fix: the right group depends on the parallel state's mesh layout."
    requires = (("grad_norm", "clip_grad", "grads_clip", "grad_clip"), "_group")
    node_types = (ast.FunctionDef, ast.AsyncFunctionDef)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        if not _GRAD_NORM_FUNC.search(node.name):
            return
        words: set[str] | None = None
        for sub in ast.walk(node):
            if not (isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Load)):
                continue
            if sub.attr not in _WHOLE_DP and sub.attr not in _SHARD_ONLY:
                continue
            if words is None:
                words = _words(node)
            shown = self.ctx.source.segment(sub)
            if sub.attr in _WHOLE_DP:
                if any("replicate" in w or "hsdp" in w.lower() for w in words):
                    continue
                self.report(
                    sub,
                    f"`{node.name}` reduces the gradient norm over `{shown}`, which under HSDP also spans the "
                    "replicas (identical gradient shards): the norm is inflated by sqrt(replicas) and every step "
                    "clipped too hard; reduce over the shard side only when replication is on",
                )
            elif not any(_SP_WORD.search(w) for w in words if w != sub.attr):
                self.report(
                    sub,
                    f"`{node.name}` reduces the gradient norm over `{shown}` without considering sequence "
                    "parallelism: when SP ranks take part in FSDP sharding (parameters sharded over "
                    "dp_shard x sp) their shards are missed and each rank clips by a different, too small norm; "
                    "reduce over the shard group that includes them",
                )
