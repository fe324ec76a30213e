"""NPU606 autograd-collective-adjoint."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import call_name, last_name
from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (faster)
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.distributed._shared import rank_slice

# what a collective does to the tensor it is given, read from its name
_GATHER = {"all_gather", "all_gather_into_tensor", "_all_gather_base"}
_ALL_REDUCE = {"all_reduce"}
_REDUCE_SCATTER = {"reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base"}
_ALL_TO_ALL = {"all_to_all", "all_to_all_single"}
_SHOWN = {
    "gather": "all-gathers",
    "reduce_scatter": "reduce-scatters",
    "all_to_all": "exchanges (all-to-all)",
}


def _kind_of_name(name: str, resolved: bool) -> str | None:
    """The collective a call name performs: exact torch names always; a helper the file does not define
    (imported) by the words of its name (``_all_gather``, ``reduce_from_sp_region``, ``seq_all_to_all``)."""
    if name in _GATHER:
        return "gather"
    if name in _ALL_REDUCE:
        return "all_reduce"
    if name in _REDUCE_SCATTER:
        return "reduce_scatter"
    if name in _ALL_TO_ALL:
        return "all_to_all"
    if resolved:
        return None
    low = name.lower()
    if "all_to_all" in low or "alltoall" in low:
        return "all_to_all"
    if "reduce_scatter" in low:
        return "reduce_scatter"
    if "all_reduce" in low or "allreduce" in low:
        return "all_reduce"
    if "all_gather" in low or "allgather" in low:
        return "gather"
    # ``gather_outputs``, ``reduce_from_sp_region``; not a local index gather (``moe_gather``)
    words = set(low.strip("_").split("_"))
    if words & _PARALLEL_WORDS:
        if "reduce" in words:
            return "all_reduce"
        if "gather" in words:
            return "gather"
    return None


_PARALLEL_WORDS = {
    "sp",
    "seq",
    "sequence",
    "parallel",
    "region",
    "group",
    "ranks",
    "outputs",
    "dist",
    "ulysses",
    "tp",
    "cp",
}


def _is_function_class(cls: ast.ClassDef) -> bool:
    """A ``torch.autograd.Function`` subclass (``Function`` however imported)."""
    for base in cls.bases:
        name = last_name(base) or ""
        if name == "Function":
            return True
    return False


def _methods(cls: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    return {s.name: s for s in cls.body if isinstance(s, ast.FunctionDef)}


class AutogradCollectiveAdjoint(Rule):
    code = "NPU606"
    name = "autograd-collective-adjoint"
    summary = (
        "A `torch.autograd.Function` whose backward does not apply the adjoint of its forward's collective "
        "(all-gather without a reduction of the gradient, a rank's slice without a gather, all-to-all one way)."
    )
    why = (
        "Sequence and tensor parallelism wrap their communication in autograd functions: the forward moves the "
        "activations between the ranks and the backward must move the gradients the opposite way. The adjoint "
        "of an all-gather is a reduction over the group (`all_reduce` then this rank's part, or "
        "`reduce_scatter`): every rank used the gathered tensor, so each rank's gradient for its shard is the "
        "sum of what all ranks computed. The adjoint of keeping this rank's slice (or of a reduce-scatter) is "
        "an all-gather, and the adjoint of an all-to-all is the reverse all-to-all. A backward that only splits "
        "the incoming gradient keeps one rank's contribution: the run does not fail, on NPU or GPU, it trains "
        "with wrong gradients for everything upstream of the gather (a ViT, the embeddings). The collectives are "
        "followed through the file's own helpers and through `OtherFunction.apply(...)`; a helper imported from "
        "elsewhere is read by its name (`..._all_gather`, `reduce_...`, `..._all_to_all`). A backward that "
        "splits without reducing is only right when every rank computes the same gradient downstream "
        "(Megatron's tensor-parallel gather): say so with a `# noqa`."
    )
    bad = (
        Example(
            """
            import torch
            import torch.distributed as dist


            def _gather_along(x, dim, group):
                parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
                dist.all_gather(parts, x.contiguous(), group=group)
                return torch.cat(parts, dim=dim)


            class GatherTokens(torch.autograd.Function):
                @staticmethod
                def forward(ctx, x, dim, group):
                    ctx.dim, ctx.group = dim, group
                    ctx.rank = dist.get_rank(group)
                    return _gather_along(x, dim, group)

                @staticmethod
                def backward(ctx, grad):
                    size = grad.size(ctx.dim) // dist.get_world_size(ctx.group)
                    return grad.narrow(ctx.dim, ctx.rank * size, size).contiguous(), None, None
            """,
            path="veomni/distributed/sequence_parallel/toy_comm.py",
            title="an all-gather through a helper, whose backward only takes this rank's part",
        ),
        Example(
            """
            import torch
            import torch.distributed as dist


            class ScatterHeads(torch.autograd.Function):
                @staticmethod
                def forward(ctx, group, x, dim):
                    ctx.group, ctx.dim = group, dim
                    world = dist.get_world_size(group)
                    my_rank = dist.get_rank(group)
                    return x.chunk(world, dim=dim)[my_rank].contiguous()

                @staticmethod
                def backward(ctx, grad):
                    return None, grad * dist.get_world_size(ctx.group), None
            """,
            path="veomni/distributed/sequence_parallel/toy_scatter.py",
            title="this rank's slice in the forward, no gather in the backward",
        ),
    )
    good = (
        Example(
            """
            import torch
            import torch.distributed as dist


            class ScatterHeads(torch.autograd.Function):
                @staticmethod
                def forward(ctx, group, x, dim):
                    ctx.group, ctx.dim = group, dim
                    my_rank = dist.get_rank(group)
                    return x.chunk(dist.get_world_size(group), dim=dim)[my_rank].contiguous()

                @staticmethod
                def backward(ctx, grad):
                    return None, GatherHeads.apply(ctx.group, grad, ctx.dim), None


            class GatherHeads(torch.autograd.Function):
                @staticmethod
                def forward(ctx, group, x, dim):
                    ctx.group, ctx.dim = group, dim
                    parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
                    dist.all_gather(parts, x.contiguous(), group=group)
                    return torch.cat(parts, dim=dim)

                @staticmethod
                def backward(ctx, grad):
                    grad = grad.contiguous()
                    dist.all_reduce(grad, group=ctx.group)
                    rank, world = dist.get_rank(ctx.group), dist.get_world_size(ctx.group)
                    return None, grad.chunk(world, dim=ctx.dim)[rank].contiguous(), None
            """,
            path="veomni/distributed/sequence_parallel/toy_comm.py",
            title="each backward applies the other's forward (through `.apply`)",
        ),
    )
    fix_safety = "No fix: which reduction (and which scaling) the gradient needs is a judgement."
    requires = ("backward", ("gather", "all_to_all", "reduce_scatter", "rank"))
    node_types = (ast.ClassDef,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        tree = ctx.tree
        self.helpers = {
            s.name: s for s in tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        self.classes = {
            s.name: s for s in _walk(tree) if isinstance(s, ast.ClassDef) and _is_function_class(s)
        }

    def _kinds(self, func: ast.AST, depth: int = 0, seen: frozenset[int] = frozenset()) -> set[str]:
        """The collectives ``func`` performs, directly, through the file's helpers or another Function's
        ``.apply`` (whose forward runs)."""
        out: set[str] = set()
        if depth > 3 or id(func) in seen:
            return out
        seen = seen | {id(func)}
        for sub in _walk(func):
            if not isinstance(sub, ast.Call):
                continue
            callee = sub.func
            if (
                isinstance(callee, ast.Attribute)
                and callee.attr == "apply"
                and isinstance(callee.value, ast.Name)
            ):
                other = self.classes.get(callee.value.id)
                forward = _methods(other).get("forward") if other is not None else None
                if forward is not None:
                    out |= self._kinds(forward, depth + 1, seen)
                else:
                    kind = _kind_of_name(callee.value.id, resolved=False)
                    if kind is not None:
                        out.add(kind)
                continue
            name = call_name(sub)
            if not name:
                continue
            helper = self.helpers.get(name) if isinstance(callee, ast.Name) else None
            if helper is not None:
                out |= self._kinds(helper, depth + 1, seen)
                continue
            kind = _kind_of_name(name, resolved=not isinstance(callee, ast.Name))
            if kind is not None:
                out.add(kind)
        return out

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.ClassDef)
        if node.name not in self.classes:
            return
        methods = _methods(node)
        forward, backward = methods.get("forward"), methods.get("backward")
        if forward is None or backward is None:
            return
        ahead, back = self._kinds(forward), self._kinds(backward)
        wanted: tuple[str, str, set[str]] | None = None
        if "gather" in ahead and not back & {"all_reduce", "reduce_scatter"}:
            wanted = (
                _SHOWN["gather"],
                "reduce the gradient over the group (`all_reduce` before taking this rank's part, or "
                "`reduce_scatter`): every rank used the gathered tensor, so the other ranks' contributions to "
                "this rank's shard are dropped",
                back,
            )
        elif "all_to_all" in ahead and "all_to_all" not in back:
            wanted = (
                _SHOWN["all_to_all"],
                "send the gradient back with the reverse all-to-all: each rank's gradient stays with the rank "
                "that computed it instead of the rank that owns the input",
                back,
            )
        elif "reduce_scatter" in ahead and "gather" not in back:
            wanted = (
                _SHOWN["reduce_scatter"],
                "all-gather the gradient: every rank's input contributed to every shard",
                back,
            )
        elif not ahead and not back and rank_slice(forward) is not None:
            wanted = (
                "keeps only this rank's slice of its input",
                "all-gather the gradient (the other ranks' slices have gradients too; here they stay zero)",
                back,
            )
        if wanted is None:
            return
        what, needed, _ = wanted
        returns = [s for s in _walk(backward) if isinstance(s, ast.Return) and s.value is not None]
        at: ast.AST = returns[-1] if returns else backward
        self.report(
            at,
            f"the forward of `{node.name}` {what} across the process group, but its backward does not "
            f"{needed}; the gradients are silently wrong under sequence/tensor parallelism",
        )
