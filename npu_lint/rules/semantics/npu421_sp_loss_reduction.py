"""NPU421 sp-loss-reduction."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import nodes_of, own_nodes
from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (memoised per file)
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.semantics._shared import functions_of
from npu_lint.veomni.upstream import last_name

_REDUCERS = {"all_reduce", "all_reduce_tensor", "reduce_across_ranks"}
_COUNT_WORDS = ("token", "count", "valid", "num_items", "_len", "denom", "total")
_GUARDS = {"clamp", "clamp_min", "clamp_", "clamp_min_", "max", "maximum", "where"}


def _is_count(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in _COUNT_WORDS) and "loss" not in lowered


def _name_of(node: ast.AST | None) -> str | None:
    return node.id if isinstance(node, ast.Name) else None


def _sp_group(call: ast.Call) -> bool:
    """Whether a reduction runs over the sequence-parallel group (`group=...sp_group`, `get_..._sp_group()`)."""
    for kw in call.keywords:
        if kw.arg == "group":
            text = ast.unparse(kw.value).lower()
            return "sp" in text or "sequence" in text or "ulysses" in text
    return len(call.args) > 1 and any("sp" in ast.unparse(a).lower() for a in call.args[1:])


def _reduce_op(call: ast.Call, helper_mean: bool) -> str | None:
    """The reduction a call performs: `op=` (a string or `ReduceOp.X`), else the default: SUM for
    `torch.distributed.all_reduce`, "mean" for VeOmni's `all_reduce` helper (``helper_mean``), None when unknown."""
    for kw in call.keywords:
        if kw.arg == "op":
            if isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                return kw.value.value.lower()
            name = last_name(kw.value)
            return None if name is None else name.lower()
    if isinstance(call.func, ast.Attribute):
        return "sum"
    return "mean" if helper_mean else None


class _Reductions:
    """The all-reductions of a function: in place (`dist.all_reduce(x)`) or by value (`y = all_reduce(x, ...)`)."""

    def __init__(self, func: ast.AST, helper_mean: bool = False) -> None:
        self.lines: dict[str, list[int]] = {}  # name -> lines where it becomes a reduction over ranks
        self.sp: set[str] = set()
        self.ops: dict[str, tuple[str, ast.Call]] = {}  # name -> a reduction other than a sum, and its call
        for node in nodes_of(func, ast.Assign, ast.Expr):  # walk order
            call = node.value  # type: ignore[attr-defined]
            if not (isinstance(call, ast.Call) and last_name(call.func) in _REDUCERS):
                continue
            if isinstance(node, ast.Assign):
                names = [_name_of(t) for t in node.targets]
            else:
                names = [_name_of(call.args[0])] if call.args else []
            op = _reduce_op(call, helper_mean)
            for name in names:
                if name:
                    self.lines.setdefault(name, []).append(node.lineno)
                    if _sp_group(call):
                        self.sp.add(name)
                    if op is not None and op not in ("sum", "reduceop.sum"):
                        self.ops[name] = (op, call)

    def reduced(self, name: str, before: int | None = None) -> bool:
        return any(before is None or ln < before for ln in self.lines.get(name, []))

    def last(self, name: str) -> int:
        return max(self.lines.get(name, [0]))


def _divisor_name(expr: ast.AST) -> tuple[str | None, bool]:
    """The count a division divides by and whether the divisor itself guards zero (`n.clamp_min(1)`, `max(n, 1)`)."""
    if isinstance(expr, ast.Name):
        return expr.id, False
    if isinstance(expr, ast.Call):
        name = last_name(expr.func)
        if name in _GUARDS:
            module_call = isinstance(expr.func, ast.Attribute) and (
                isinstance(expr.func.value, ast.Name)
                and expr.func.value.id in ("torch", "np", "numpy", "math")
            )  # `torch.clamp(n, min=1)` guards `n`, not `torch`
            inner = (
                expr.func.value
                if isinstance(expr.func, ast.Attribute) and not module_call
                else (expr.args[0] if expr.args else None)
            )
            if isinstance(inner, ast.Name):
                return inner.id, True
            for arg in expr.args:
                if isinstance(arg, ast.Name):
                    return arg.id, True
        if name in ("float", "to", "item") and isinstance(expr.func, ast.Attribute):
            return _divisor_name(expr.func.value)
    return None, False


def _guarded_after(func: ast.AST, name: str, after: int, before: int) -> bool:
    """A test on ``name`` between its reduction and the division (`if n == 0: return ...`, `torch.where(n > 0, ...)`)."""
    for node in _walk(func):
        test = None
        if isinstance(node, (ast.If, ast.IfExp, ast.Assert)):
            test = node.test
        elif isinstance(node, ast.Call) and last_name(node.func) == "where" and node.args:
            test = node.args[0]
        if test is None or not (after <= getattr(node, "lineno", 0) <= before):
            continue
        if any(isinstance(n, ast.Name) and n.id == name for n in _walk(test)):
            return True
    return False


def _autograd_saved(cls: ast.ClassDef) -> dict[int, str]:
    """Positions of `ctx.save_for_backward(...)` in an autograd Function's forward that hold a reduced count."""
    forward = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "forward"), None)
    if forward is None:
        return {}
    reductions = _Reductions(forward)
    out: dict[int, str] = {}
    for node in _walk(forward):
        if isinstance(node, ast.Call) and last_name(node.func) == "save_for_backward":
            for i, arg in enumerate(node.args):
                name = _name_of(arg)
                if name and reductions.reduced(name) and _is_count(name):
                    out[i] = name
    return out


_DP_SIZES = ("fsdp_size", "dp_size", "world_size", "data_parallel_size", "num_replicas")
_COUNT_TARGETS = ("num_items_in_batch", "num_valid_tokens", "valid_tokens", "num_label_tokens")


def _all_positions(expr: ast.AST) -> str | None:
    """`labels.numel()`, `labels.size(0) * labels.size(1)`, `labels.shape[-1]`, `len(labels)`: a count of every
    position, the ignored ones included (the text of the call that says so)."""
    for node in _walk(expr):
        if isinstance(node, ast.Call):
            name = last_name(node.func)
            if name in ("numel", "nelement") or (name == "size" and isinstance(node.func, ast.Attribute)):
                return ast.unparse(node)
            if isinstance(node.func, ast.Name) and node.func.id == "len":
                return ast.unparse(node)
        elif isinstance(node, ast.Attribute) and node.attr == "shape":
            return ast.unparse(node)
    return None


def _counts_labels(expr: ast.AST) -> bool:
    """Whether an expression compares against the ignore index or a mask (`labels != ignore_index`, `.ne(...)`)."""
    for node in _walk(expr):
        if isinstance(node, ast.Compare):
            return True
        if isinstance(node, ast.Call) and last_name(node.func) in ("ne", "count_nonzero", "eq", "nonzero"):
            return True
    return False


def _ce_results(func: ast.AST) -> list[tuple[ast.Assign, str]]:
    """`x = F.cross_entropy(...)`, `x = nn.CrossEntropyLoss()(...)`, `x = fct(...)` with `fct = CrossEntropyLoss(...)`
    in the function: a per-rank token-mean loss and the local it lands in."""
    makers = {
        t.id
        for n in _walk(func)
        if isinstance(n, ast.Assign)
        and isinstance(n.value, ast.Call)
        and last_name(n.value.func) == "CrossEntropyLoss"
        and not any(kw.arg == "reduction" for kw in n.value.keywords)
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    out = []
    for n in _walk(func):
        if not (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)):
            continue
        call = n.value
        if not isinstance(call, ast.Call):
            continue
        if any(kw.arg == "reduction" for kw in call.keywords):
            continue  # a per-token or summed loss: reduced elsewhere on its own terms
        callee = call.func
        direct = last_name(callee) == "cross_entropy" or (
            isinstance(callee, ast.Call)
            and last_name(callee.func) == "CrossEntropyLoss"
            and not any(kw.arg == "reduction" for kw in callee.keywords)
        )
        if direct or (isinstance(callee, ast.Name) and callee.id in makers):
            out.append((n, n.targets[0].id))
    return out


def _returned_losses(func: ast.AST, seen: set[str]) -> list[tuple[ast.AST, str]]:
    """A loss local the function computes with a call of its own (a chunked loss's `Function.apply`, a loss
    helper: `chunk_loss = ChunkLoss.apply(...)`, `loss, logits = loss_fn(...)`) and returns: reported at the
    return that hands it out (where the reduction belongs). Cross-entropy results are `_ce_results`'."""
    made: set[str] = set()
    for n in own_nodes(func):
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and not _sp_reducer(n.value):
            for target in n.targets:
                elts = target.elts if isinstance(target, ast.Tuple) else [target]
                made.update(e.id for e in elts if isinstance(e, ast.Name) and "loss" in e.id.lower())
    out: list[tuple[ast.AST, str]] = []
    for n in own_nodes(func):
        if isinstance(n, ast.Return) and n.value is not None:
            values = n.value.elts if isinstance(n.value, ast.Tuple) else [n.value]
            if any(isinstance(v, ast.Name) and _is_count(v.id) for v in values):
                continue  # the loss handed on with its token count: the caller weights and reduces it
            out.extend(
                (n, v.id) for v in values if isinstance(v, ast.Name) and v.id in made and v.id not in seen
            )
    return out


def _reducer_name(name: str) -> bool:
    lowered = name.lower()
    return "reduce" in lowered and "loss" in lowered and "sequence" in lowered


def _is_gather(node: ast.AST) -> bool:
    """A call that gathers over the ranks (`gather_outputs(...)`, `dist.all_gather(...)`, `_AllGather.apply(...)`);
    an all-to-all that scatters the sequence back (`gather_heads_scatter_seq`) hands on a shard again."""
    if not isinstance(node, ast.Call):
        return False
    callee = (last_name(node.func) or "").lower()
    if callee == "apply" and isinstance(node.func, ast.Attribute):
        callee = (last_name(node.func.value) or "").lower()
    return "gather" in callee and "scatter" not in callee


def _gathered(nodes: list[ast.AST]) -> set[str]:
    """The locals that hold tensors gathered over the ranks (`h = gather_outputs(h, gather_dim=1, group=sp)`, the
    output list of `dist.all_gather(parts, h)`) and every local computed from them: a loss of those is the whole
    sequence's, no shard's. A gather of something else (positions, metrics) says nothing of the loss."""
    out: set[str] = set()
    flows: list[tuple[set[str], set[str]]] = []  # (names stored, names read)
    for n in nodes:
        if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and n.value is not None:
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            stored = {m.id for t in targets for m in _walk(t) if isinstance(m, ast.Name)}
            if any(_is_gather(m) for m in _walk(n.value)):
                out |= stored
            read = {m.id for m in _walk(n.value) if isinstance(m, ast.Name) and m.id != "self"}
            flows.append((stored, read))
        elif isinstance(n, ast.Expr) and _is_gather(n.value) and n.value.args:  # type: ignore[attr-defined]
            buffer = n.value.args[0]  # type: ignore[attr-defined]
            out.update(m.id for m in _walk(buffer) if isinstance(m, ast.Name))  # filled in place
    changed = bool(out)
    while changed:
        changed = False
        for stored, read in flows:
            if stored - out and read & out:
                out |= stored
                changed = True
    return out


def _sp_reducer(call: ast.Call) -> bool:
    callee = (last_name(call.func) or "").lower()
    if callee == "apply" and isinstance(call.func, ast.Attribute):
        callee = (last_name(call.func.value) or "").lower()
    return ("reduce" in callee and "loss" in callee) or callee in _REDUCERS or "all_gather" in callee


class SpLossReduction(Rule):
    code = "NPU421"
    name = "sp-loss-reduction"
    summary = "A loss reduced across ranks is divided by a token count that is not summed too (or not weighted by it first), or by a summed count with no guard against zero, or weighted under sequence parallelism by a count that is not the group's; or a loss's token count counts the ignored labels too; or a loss's autograd backward ignores the incoming gradient; or a function under sequence parallelism returns a shard loss (a cross-entropy, a chunked loss's result) that never reaches the SP reduction its file imports."
    why = (
        "Under sequence parallelism each rank holds a slice of every sequence, so a token-mean loss is "
        "`sum_ranks(loss_r * n_r) / sum_ranks(n_r)`: the loss-token products and the token counts are both summed "
        "over the group. Dividing the summed loss by this rank's count mis-scales every micro-batch by the group's "
        "imbalance; dividing by the summed count with no guard turns a micro-batch whose labels are all ignored on "
        "every rank into 0/0 = NaN, which the gradient reduction then spreads to every replica. Likewise, where a "
        "loss that is already the group's mean is re-weighted by a token count (and divided by the group size), "
        "the count must be the group's, not this rank's. A count reduced with a mean or a max (VeOmni's own `all_reduce` "
        "helper means by default) and a loss summed without being weighted by its count first break the same "
        "formula, and so does a count of every label position (`labels.numel()`) where the count of the labels that "
        "are not ignored is meant (`num_items_in_batch`, the count handed to the SP reduction). A loss's own autograd backward (a chunked loss that precomputes its gradients in the forward) must "
        "multiply what it returns by the incoming gradient, or every scaling applied to the loss afterwards is "
        "lost. The Ascend runs that use sequence parallelism for long "
        "contexts hit all three. Checked wherever a function all-reduces a loss or its token count "
        "(`dist.all_reduce`, the tree's `all_reduce` helper), in autograd functions' backward passes through the "
        "saved counts too, whatever the names. A returned loss computed from values gathered over the ranks "
        "(`gather_outputs(...)`, the list `dist.all_gather` fills, and what is computed from them) is the whole "
        "sequence's, not a shard's; a gather of anything else in the function does not make it so."
    )
    bad = (
        Example(
            """
            from veomni.utils.dist_utils import all_reduce


            def group_weighted(step_loss, shard_tokens, step_tokens):
                ps = get_parallel_state()
                group_tokens = all_reduce(shard_tokens, op="sum", group=ps.sp_group)
                return step_loss * group_tokens / step_tokens * ps.fsdp_size
            """,
            path="veomni/trainer/weighting.py",
            title="a loss weighted by the SP group's token count, never divided by the SP size",
        ),
        Example(
            """
            from torch.nn import CrossEntropyLoss

            from veomni.distributed.sequence_parallel import reduce_sequence_parallel_loss


            def caption_and_box_loss(self, text_logits, text_labels, box_logits, box_labels):
                fct = CrossEntropyLoss()
                text_loss = fct(text_logits.flatten(0, 1), text_labels.flatten())
                box_loss = fct(box_logits.flatten(0, 1), box_labels.flatten())
                if get_parallel_state().sp_enabled:
                    text_loss = reduce_sequence_parallel_loss(text_loss, (text_labels != -100).sum())
                return text_loss + box_loss
            """,
            path="veomni/models/transformers/toy_vlm/modeling_toy_vlm.py",
            title="a second head's shard loss never reduced over the SP group",
        ),
        Example(
            """
            from veomni.distributed.sequence_parallel import reduce_sequence_parallel_loss


            def chunked_loss(hidden_states, weight, labels):
                if not get_parallel_state().sp_enabled:
                    labels = labels[..., 1:]
                chunk_loss = ChunkedCE.apply(hidden_states, weight, labels)
                return chunk_loss, None
            """,
            path="veomni/ops/kernels/cross_entropy/chunked.py",
            title="a chunked loss returned without the SP reduction",
        ),
        Example(
            """
            from veomni.utils.dist_utils import all_reduce


            def weight_by_tokens(losses, rank_tokens):
                out = {}
                for key, value in losses.items():
                    step_tokens = all_reduce(rank_tokens[key], op="sum")
                    out[key] = value * rank_tokens[key] / step_tokens
                return out


            def weight_one(loss_val, local_count):
                total_count = all_reduce(local_count, op="sum")
                return loss_val * local_count / total_count
            """,
            path="veomni/utils/token_weighting.py",
            title="a loss weighted by its share of the world's token count without the data-parallel size",
        ),
        Example(
            """
            import torch.distributed as dist


            def group_mean_loss(loss, n_tokens, group):
                weighted = loss * n_tokens
                dist.all_reduce(weighted, group=group)
                return weighted / n_tokens
            """,
            path="veomni/distributed/sequence_parallel/reduce.py",
            title="the summed loss divided by this rank's count",
        ),
        Example(
            """
            import torch
            import torch.distributed as dist


            class GroupMean(torch.autograd.Function):
                @staticmethod
                def forward(ctx, loss, valid, group=None):
                    local = valid.detach().clone()
                    loss = loss * valid
                    dist.all_reduce(loss, group=group)
                    dist.all_reduce(valid, group=group)
                    ctx.save_for_backward(local, valid)
                    return loss / valid.clamp(min=1)

                @staticmethod
                def backward(ctx, grad):
                    local, total_valid = ctx.saved_tensors
                    return grad * local / total_valid, None, None
            """,
            path="veomni/distributed/sequence_parallel/reduce.py",
            title="the backward divides by the summed count unguarded",
        ),
        Example(
            """
            def scale_step_loss(loss, rank_tokens, step_tokens):
                state = get_parallel_state()
                weighted = loss * rank_tokens / step_tokens
                if state.sp_enabled:
                    weighted = weighted / state.sp_size
                return weighted
            """,
            path="veomni/utils/step_loss.py",
            title="an SP-mean loss weighted by this rank's own token count",
        ),
        Example(
            """
            from veomni.utils.dist_utils import all_reduce


            def weight_micro_loss(micro_loss, micro_tokens, step_tokens):
                step_total = all_reduce(step_tokens.item())
                return micro_loss * micro_tokens / step_total
            """,
            path="veomni/trainer/loss_weight.py",
            title="the step's token count reduced with the helper's default op, a mean",
        ),
        Example(
            """
            def seq_cls_loss(logits, target, ignore_index=-100):
                loss = token_ce(logits, target, ignore_index)
                if get_parallel_state().sp_enabled:
                    n_positions = target.numel()
                    loss = reduce_sequence_parallel_loss(loss, n_positions)
                return loss
            """,
            path="veomni/ops/kernels/cross_entropy/cls.py",
            title="the SP reduction weighted by every position, ignored labels included",
        ),
        Example(
            """
            import torch


            class BlockwiseLoss(torch.autograd.Function):
                @staticmethod
                def forward(ctx, hidden, weight, labels):
                    loss, d_hidden, d_weight = blockwise_loss_and_grads(hidden, weight, labels)
                    ctx.save_for_backward(d_hidden, d_weight)
                    return loss

                @staticmethod
                def backward(ctx, d_loss):
                    d_hidden, d_weight = ctx.saved_tensors
                    return d_hidden, d_weight, None
            """,
            path="veomni/ops/kernels/cross_entropy/blockwise.py",
            title="a loss's backward that returns its precomputed gradients unscaled",
        ),
    )
    good = (
        Example(
            """
            from torch.nn import CrossEntropyLoss

            from veomni.distributed.sequence_parallel import reduce_sequence_parallel_loss
            from veomni.utils.dist_utils import all_reduce


            def caption_and_box_loss(self, text_logits, text_labels, box_logits, box_labels):
                fct = CrossEntropyLoss()
                text_loss = fct(text_logits.flatten(0, 1), text_labels.flatten())
                box_loss = fct(box_logits.flatten(0, 1), box_labels.flatten())
                if get_parallel_state().sp_enabled:
                    text_loss = reduce_sequence_parallel_loss(text_loss, (text_labels != -100).sum())
                    box_loss = reduce_sequence_parallel_loss(box_loss, (box_labels != -100).sum())
                return text_loss + box_loss


            def weight_one(loss_val, local_count):
                total_count = all_reduce(local_count, op="sum")
                return loss_val * local_count / total_count * get_parallel_state().fsdp_size
            """,
            path="veomni/utils/token_weighting.py",
        ),
        Example(
            """
            import torch
            import torch.distributed as dist


            class GroupMean(torch.autograd.Function):
                @staticmethod
                def forward(ctx, loss, valid, group=None):
                    local = valid.detach().clone()
                    loss = loss * valid
                    dist.all_reduce(loss, group=group)
                    dist.all_reduce(valid, group=group)
                    ctx.save_for_backward(local, valid)
                    return loss / valid.clamp(min=1)

                @staticmethod
                def backward(ctx, grad):
                    local, total_valid = ctx.saved_tensors
                    return grad * local / torch.clamp(total_valid, min=1), None, None


            def scale_step_loss(loss, rank_tokens, step_tokens):
                state = get_parallel_state()
                if state.sp_enabled:
                    rank_tokens = all_reduce(rank_tokens.item(), op="sum", group=state.sp_group)
                weighted = loss * rank_tokens / step_tokens
                if state.sp_enabled:
                    weighted = weighted / state.sp_size
                return weighted
            """,
            path="veomni/distributed/sequence_parallel/reduce.py",
        ),
    )
    fix_safety = "No fix: which count to reduce and which group to reduce it over are the caller's."

    requires = (
        ("all_reduce", "sp_size", "sp_enabled", "saved_tensors", "num_items_in_batch", "num_valid_tokens"),
    )
    node_types = ()

    @classmethod
    def applies_to(
        cls, ctx: Context
    ) -> bool:  # loss utilities, distributed code and kernels: anything but tests
        return not ctx.source.kind.test

    def _ignored_grad(self, cls: ast.ClassDef) -> None:
        """A loss's autograd backward must scale what it returns by the incoming gradient (`grad_output`): the
        loss is scaled after it (an auxiliary coefficient, gradient accumulation, the SP reduction)."""
        methods = {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)}
        forward, backward = methods.get("forward"), methods.get("backward")
        if forward is None or backward is None:
            return
        returns_loss = any(
            isinstance(n, ast.Return) and isinstance(n.value, ast.Name) and "loss" in n.value.id.lower()
            for n in _walk(forward)
        )
        if "loss" not in cls.name.lower() and not returns_loss:
            return
        args = backward.args
        grads = [a.arg for a in [*args.posonlyargs, *args.args][1:]]
        if args.vararg is not None:
            grads.append(args.vararg.arg)
        if not grads:
            return
        binds: dict[str, list[ast.expr]] = {}
        returns: list[ast.expr] = []
        for node in _walk(backward):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    for name in _walk(target):
                        if isinstance(name, ast.Name):
                            binds.setdefault(name.id, []).append(node.value)
            elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                binds.setdefault(node.target.id, []).append(node.value)
            elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
                # a call writing into its arguments (`kernel[grid](x, out, scale)`, `out.mul_(g)`): each name it
                # touches may take its value from the others
                for name in _walk(node.value):
                    if isinstance(name, ast.Name):
                        binds.setdefault(name.id, []).append(node.value)
            elif isinstance(node, ast.Return) and node.value is not None:
                returns.append(node.value)
        seen: set[str] = set()
        stack = [n.id for r in returns for n in _walk(r) if isinstance(n, ast.Name)]
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            for value in binds.get(name, []):
                stack.extend(n.id for n in _walk(value) if isinstance(n, ast.Name))
        if returns and not seen.intersection(grads):
            ret = max((n for n in _walk(backward) if isinstance(n, ast.Return)), key=lambda n: n.lineno)
            self.report(
                ret,
                f"`{cls.name}.backward` returns gradients that never use `{grads[0]}`, the gradient flowing into the "
                "loss: any scaling applied to the loss afterwards (a coefficient, gradient accumulation, the "
                "sequence-parallel reduction) is lost; multiply by it",
            )

    def finish(self) -> None:
        tree = self.ctx.tree
        for node in nodes_of(tree, ast.ClassDef):
            if any(isinstance(f, ast.FunctionDef) and f.name == "backward" for f in node.body):
                self._ignored_grad(node)
        self.helper_mean = any(  # VeOmni's `all_reduce(data, op="mean", group=None)` helper, imported
            any(a.name == "all_reduce" for a in n.names) and "torch" not in (n.module or "")
            for n in nodes_of(tree, ast.ImportFrom)
        )
        text = self.ctx.source.text
        self.sp_reduced_here = (
            "sp_enabled" in text
            and "reduce" in text
            and any(  # the file calls or imports the tree's SP loss reduction
                "reduce" in name.lower() and "loss" in name.lower() and "sequence" in name.lower()
                for n in nodes_of(tree, ast.ImportFrom, ast.Call)
                for name in (
                    [a.name for a in n.names]
                    if isinstance(n, ast.ImportFrom)
                    else [last_name(n.func) or ""]
                    if isinstance(n, ast.Call)
                    else []
                )
            )
        )
        saved: dict[int, dict[int, str]] = {}
        for node in nodes_of(tree, ast.ClassDef):
            positions = _autograd_saved(node)
            if positions:
                backward = next(
                    (f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "backward"),
                    None,
                )
                if backward is not None:
                    saved[id(backward)] = positions
        for func in functions_of(tree):
            self._check(func, saved.get(id(func), {}))

    def _check(self, func: ast.FunctionDef | ast.AsyncFunctionDef, saved: dict[int, str]) -> None:
        red = _Reductions(func, self.helper_mean)
        totals: dict[str, int] = {}  # reduced counts known from the forward's saved tensors (backward)
        if saved:
            for node in nodes_of(func, ast.Assign):
                if (
                    isinstance(node, ast.Assign)
                    and isinstance(node.targets[0], ast.Tuple)
                    and isinstance(node.value, ast.Attribute)
                    and node.value.attr == "saved_tensors"
                ):
                    for i, elt in enumerate(node.targets[0].elts):
                        if i in saved and isinstance(elt, ast.Name):
                            totals[elt.id] = node.lineno
        reduced_losses = {n for n in red.lines if not _is_count(n)}
        # a count renamed on the way (`total = torch.clamp(num_tokens, min=1)`): the division reads the source's
        # reductions, and the guard travels with it
        renamed: dict[str, tuple[str, bool, int]] = {}
        for node in nodes_of(func, ast.Assign):
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
            ):
                source, guards = _divisor_name(node.value)
                target = node.targets[0].id
                if source is not None and source != target and target not in red.lines:
                    renamed[target] = (source, guards, node.lineno)
        for node in nodes_of(func, ast.BinOp):
            if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)):
                continue
            count, guarded = _divisor_name(node.right)
            if count in renamed and renamed[count][2] < node.lineno:
                count, guarded = renamed[count][0], guarded or renamed[count][1]
            if count is None or not _is_count(count):
                continue
            line = node.lineno
            numer = {n.id for n in _walk(node.left) if isinstance(n, ast.Name)}
            if count in totals:
                if not guarded and not _guarded_after(func, count, totals[count], line):
                    self._zero(node, func, count)
                continue
            summed = {n for n in numer if n in reduced_losses and red.reduced(n, line)}
            if (
                not summed
                and count not in red.sp
                and red.reduced(count, line + 1)
                and any("loss" in n.lower() for n in numer)
                and any(_is_count(n) for n in numer)
            ):
                self._dp_factor(func, node, count)
            if (
                red.reduced(count, line + 1)
                and count in red.ops
                and (summed or any("loss" in n for n in numer))
            ):
                self._not_summed(red.ops[count], count)
                continue
            if not summed:
                continue
            if not red.reduced(count, line + 1):
                self.report(
                    node,
                    f"`{sorted(summed)[0]}` is summed over the ranks, but `{func.name}` divides it by `{count}`, "
                    "this rank's count: all-reduce the count too, or every micro-batch is scaled by the group's "
                    "token imbalance",
                )
            elif not guarded and not _guarded_after(func, count, red.last(count), line):
                self._zero(node, func, count)
            else:
                self._weighted_first(func, red, sorted(summed)[0], count, node)
        self._sp_weighting(func, red)
        self._counts(func)
        if self.sp_reduced_here:
            self._unreduced_shard_loss(func)

    def _reducer_routes(self) -> set[str]:
        """Names that reach the SP loss reduction in this file: a name bound to it (`reduce_fn =
        reduce_sequence_parallel_loss if sp else ...`) or a function whose body calls it (`_sp_reduce`)."""
        routes: set[str] | None = self.ctx.memo.get("npu421.routes")
        if routes is None:
            routes = set()
            for n in nodes_of(self.ctx.tree, ast.Assign, ast.FunctionDef):
                if isinstance(n, ast.FunctionDef):
                    if any(isinstance(c, ast.Call) and _sp_reducer(c) for c in _walk(n)):
                        routes.add(n.name)
                elif any(
                    isinstance(m, (ast.Name, ast.Attribute)) and _reducer_name(last_name(m) or "")
                    for m in _walk(n.value)
                ):
                    routes.update(t.id for t in n.targets if isinstance(t, ast.Name))
            self.ctx.memo["npu421.routes"] = routes
        return routes

    def _unreduced_shard_loss(self, func: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """A function that branches on the sequence-parallel switch computes a token-mean cross-entropy on the
        rank's shard: it must reach the SP loss reduction (which this file imports) before it is used."""
        nodes = _walk(func)
        if not any(
            isinstance(n, (ast.Name, ast.Attribute)) and (last_name(n) or "") == "sp_enabled" for n in nodes
        ):
            return
        reduced: set[str] = set()
        for n in nodes:
            if isinstance(n, ast.Call) and _sp_reducer(n):
                reduced.update(
                    m.id
                    for a in [*n.args, *(k.value for k in n.keywords)]
                    for m in _walk(a)
                    if isinstance(m, ast.Name)
                )
        found = _ce_results(func)
        seen = {name for _assign, name in found}
        gathered = _gathered(nodes)
        returned = [(at, name) for at, name in _returned_losses(func, seen) if name not in gathered]
        if returned:
            routes = self._reducer_routes()
            for n in nodes:
                if isinstance(n, ast.Call) and (last_name(n.func) or "") in routes:
                    reduced.update(m.id for a in n.args for m in _walk(a) if isinstance(m, ast.Name))
                    reduced.update(
                        m.id for k in n.keywords for m in _walk(k.value) if isinstance(m, ast.Name)
                    )
        for at, name in [*found, *returned]:
            if name in reduced:
                continue
            self.report(
                at,
                f"`{func.name}` runs under sequence parallelism (it reads `sp_enabled`), but `{name}` is this rank's "
                "shard mean and never reaches the sequence-parallel loss reduction this file imports: "
                "each rank trains on its own shard's mean (NaN on a shard without labels), not the group's "
                "token-weighted mean; reduce it over the SP group",
            )

    def _dp_factor(self, func: ast.FunctionDef | ast.AsyncFunctionDef, div: ast.BinOp, count: str) -> None:
        """`loss * local_tokens / global_tokens`, the global count summed over every rank: the data-parallel
        gradient reduction (FSDP, DDP) then averages over the ranks, so the weighted loss must be multiplied by
        the data-parallel size once, or every gradient is that many times too small."""
        if getattr(self, "_dp_reported", None) == id(func):
            return

        def sizes(side: ast.AST) -> str | None:
            for m in _walk(side):
                if isinstance(m, (ast.Name, ast.Attribute)):
                    name = (last_name(m) or "").lower()
                    if any(w in name for w in _DP_SIZES):
                        return ast.unparse(m)
            return None

        divided: str | None = None
        for node in _walk(func):
            if isinstance(node, (ast.BinOp, ast.AugAssign)) and isinstance(node.op, ast.Mult):
                sides = (
                    [node.target, node.value] if isinstance(node, ast.AugAssign) else [node.left, node.right]
                )
                if any(sizes(side) for side in sides):
                    return
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
                divided = divided or sizes(node.right)
            elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Div):
                divided = divided or sizes(node.value)
        self._dp_reported = id(func)
        if divided is not None:
            self.report(
                div,
                f"`{func.name}` weights the loss by its share of `{count}`, a token count summed over every rank, and "
                f"then divides by `{divided}`: the gradient reduction (FSDP/DDP) already averages over the ranks, "
                "so the data-parallel size must be multiplied in once, not divided out again",
            )
            return
        self.report(
            div,
            f"`{func.name}` weights the loss by its share of `{count}`, a token count summed over every rank, but never "
            "multiplies by the data-parallel size: the gradient reduction (FSDP/DDP) then averages over the ranks, "
            "so every gradient is that many times too small; multiply by the FSDP/data-parallel size once",
        )

    def _counts(self, func: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """The token count a loss is normalised or reduced by counts the labels that are not ignored."""
        bindings: dict[str, list[ast.Assign]] = {}
        for node in nodes_of(func, ast.Assign):
            if len(node.targets) == 1:  # type: ignore[attr-defined]
                name = _name_of(node.targets[0])
                if name:
                    bindings.setdefault(name, []).append(node)
        candidates: list[tuple[ast.AST, ast.expr, str]] = []
        for name, assigns in bindings.items():
            if name in _COUNT_TARGETS:
                candidates.extend((a, a.value, f"`{name}`") for a in assigns)
        for node in nodes_of(func, ast.Call):
            callee = last_name(node.func) or ""
            owner = last_name(node.func.value) if isinstance(node.func, ast.Attribute) else ""
            reducer = ("reduce" in callee.lower() and "loss" in callee.lower()) or (
                callee == "apply"
                and owner is not None
                and "reduce" in owner.lower()
                and "loss" in owner.lower()
            )
            if not reducer:
                continue
            arg = node.args[1] if len(node.args) > 1 else None
            arg = next((kw.value for kw in node.keywords if kw.arg in _COUNT_TARGETS), arg)
            if arg is None:
                continue
            if isinstance(arg, ast.Name) and arg.id in bindings:
                before = [a for a in bindings[arg.id] if a.lineno <= node.lineno]
                if before and arg.id not in _COUNT_TARGETS:
                    last = max(before, key=lambda a: a.lineno)
                    candidates.append((last, last.value, f"`{arg.id}`"))
            elif not isinstance(arg, ast.Name):
                candidates.append((arg, arg, f"the count given to `{callee}`"))
        seen: set[int] = set()
        for where, value, name in candidates:
            if id(where) in seen or _counts_labels(value):
                continue
            counted = _all_positions(value)
            if counted is None:
                continue
            seen.add(id(where))
            self.report(
                where,
                f"{name} is based on `{counted}`: it counts every label position, the ignored ones (padding, "
                "prompts) included, so the token-mean loss is divided by too many tokens; count "
                "`(labels != ignore_index).sum()`",
            )

    def _weighted_first(self, func: ast.AST, red: _Reductions, loss: str, count: str, div: ast.AST) -> None:
        """A summed loss divided by the summed count must have been weighted by the count before the sum."""
        if any(word in loss.lower() for word in ("sum", "total")):  # already a sum of per-token losses
            return
        first = min(red.lines[loss])
        for node in _walk(func):
            if getattr(node, "lineno", first) >= first:
                continue
            if (
                isinstance(node, ast.AugAssign)
                and isinstance(node.op, ast.Mult)
                and _name_of(node.target) == loss
            ):
                return
            if isinstance(node, ast.Assign) and any(_name_of(t) == loss for t in node.targets):
                if any(isinstance(b, ast.BinOp) and isinstance(b.op, ast.Mult) for b in _walk(node.value)):
                    return
                if not (
                    isinstance(node.value, ast.Call)
                    and last_name(node.value.func) in ("where", "clone", "detach")
                ):
                    return  # bound from something else (a sum of per-token losses): not ours to judge
        if any(isinstance(n, ast.arg) and n.arg == loss for n in _walk(func)):
            self.report(
                div,
                f"`{getattr(func, 'name', '?')}` sums `{loss}` over the ranks and divides by the summed `{count}`, "
                f"but never weights `{loss}` by `{count}` first: the ranks' mean losses are added up and divided "
                "by the total token count, so the loss shrinks with the group size",
            )

    def _not_summed(self, op_call: tuple[str, ast.Call], count: str) -> None:
        op, call = op_call
        self.report(
            call,
            f"`{count}` is reduced with `{op}`, not summed: a token-mean loss divides by the number of tokens of all "
            "the ranks, so the count must be reduced with a sum",
        )

    def _zero(self, node: ast.AST, func: ast.AST, count: str) -> None:
        self.report(
            node,
            f"`{getattr(func, 'name', '?')}` divides by `{count}`, a token count summed over the ranks, with no "
            "guard: a micro-batch whose labels are all ignored on every rank gives 0/0 = NaN, which the gradient "
            f"reduction spreads to every replica; divide by `{count}.clamp_min(1)` (and zero the loss)",
        )

    def _sp_weight_undivided(
        self, func: ast.FunctionDef | ast.AsyncFunctionDef, red: _Reductions, nodes: list[ast.AST]
    ) -> None:
        """A loss weighted by a token count summed over the SP group: every rank of the group now carries the
        group's whole weight, and the data-parallel gradient reduction (whose group includes the SP ranks) adds
        the group's copies up, so the loss must be divided by the SP size once."""
        for node in nodes:
            if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)):
                continue
            names = [_name_of(node.left), _name_of(node.right)]
            if not any(n and "loss" in n.lower() for n in names):
                continue
            count = next((n for n in names if n and _is_count(n) and n in red.sp), None)
            if count is None or count in red.ops:
                continue
            self.report(
                node,
                f"`{func.name}` weights the loss by `{count}`, a token count summed over the sequence-parallel "
                "group, so every rank of the group carries the group's whole weight; the data-parallel gradient "
                "reduction then adds the SP ranks' copies up: divide the loss by the SP size once",
            )
            return

    def _sp_weighting(self, func: ast.FunctionDef | ast.AsyncFunctionDef, red: _Reductions) -> None:
        """A loss divided by the SP group size (it is the group's mean) weighted by a count not reduced over the group."""
        nodes = nodes_of(func, ast.BinOp)  # the products and quotients read below
        by_sp = any(
            isinstance(n, ast.BinOp)
            and isinstance(n.op, ast.Div)
            and any(
                isinstance(m, (ast.Name, ast.Attribute)) and "sp_size" in (last_name(m) or "")
                for m in _walk(n.right)
            )
            for n in nodes
        )
        if not by_sp:
            self._sp_weight_undivided(func, red, nodes)
            return
        for node in nodes:
            if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)):
                continue
            left, right = node.left, node.right
            names = [_name_of(left), _name_of(right)]
            if not any(n and "loss" in n.lower() for n in names):
                continue
            for count in names:
                if count and _is_count(count) and count in red.sp and count in red.ops:
                    self._not_summed(red.ops[count], count)
                    return
                if count and _is_count(count) and count not in red.sp:
                    # reported where the rank-local count is taken (the reduction belongs right after it)
                    bound = [
                        n
                        for n in nodes_of(func, ast.Assign)
                        if isinstance(n, ast.Assign)
                        and n.lineno < node.lineno
                        and any(_name_of(t) == count for t in n.targets)
                    ]
                    where = max(bound, key=lambda n: n.lineno) if bound else node
                    self.report(
                        where,
                        f"`{func.name}` treats the loss as the sequence-parallel group's mean (it divides by the SP "
                        f"size) but weights it by `{count}`, this rank's token count: all-reduce `{count}` over the "
                        "SP group first",
                    )
                    return
