"""NPU420 load-balancing-loss-form."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (memoised per file)
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.semantics._shared import functions_of
from npu_lint.veomni.upstream import last_name, patched_methods

_COUNTERS = {"one_hot", "scatter_add_", "scatter_add", "bincount", "histc", "index_add_"}
_SCALE_OPS = (ast.Mult, ast.Div, ast.Pow, ast.FloorDiv)


def _expert_count_name(node: ast.AST) -> str | None:
    """`num_experts`, `self.n_routed_experts`, `num_local_experts`: an expert count, by name."""
    name = last_name(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
    if name is None:
        return None
    lowered = name.lower()
    if "per_" in lowered:  # `num_experts_per_tok` is the top-k
        return None
    if "experts" in lowered and (lowered.startswith(("num", "n_")) or "_num" in lowered):
        return name
    return None


def _literal_dim(call: ast.Call, position: int) -> int | None:
    value = next((kw.value for kw in call.keywords if kw.arg == "dim"), None)
    if value is None and len(call.args) > position:
        value = call.args[position]
    if (
        isinstance(value, ast.UnaryOp)
        and isinstance(value.op, ast.USub)
        and isinstance(value.operand, ast.Constant)
    ):
        inner = value.operand.value
        return -inner if type(inner) is int else None
    if isinstance(value, ast.Constant) and type(value.value) is int:
        return value.value
    return None


def _scaled_by(expr: ast.AST, counts: set[str]) -> bool:
    """Whether ``expr`` multiplies or divides by an expert count (directly, or inside a nested product)."""
    for node in _walk(expr):
        if isinstance(node, ast.BinOp) and isinstance(node.op, _SCALE_OPS):
            for side in (node.left, node.right):
                stack = [side]
                while stack:
                    cur = stack.pop()
                    if isinstance(cur, ast.BinOp):
                        stack.extend((cur.left, cur.right))
                    elif isinstance(cur, (ast.Name, ast.Attribute)) and last_name(cur) in counts:
                        return True
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, _SCALE_OPS):
            if isinstance(node.value, (ast.Name, ast.Attribute)) and last_name(node.value) in counts:
                return True
    return False


_LOSS_WORDS = ("loss", "balanc", "aux")
# the MoE routing modules (a router or gate, or the sparse block that routes itself)
_ROUTING_CLASSES = ("Router", "Gate", "MoeBlock", "MoEBlock", "SparseMoeBlock", "MoE", "Moe")


def _axis_calls(func: ast.AST) -> list[tuple[ast.Call, str, int | None]]:
    """The softmax and top-k calls of a function with their literal axis (None when not a literal)."""
    out: list[tuple[ast.Call, str, int | None]] = []
    for call in _walk(func):
        if not isinstance(call, ast.Call):
            continue
        name = last_name(call.func)
        if name not in ("softmax", "topk"):
            continue
        receiver = isinstance(call.func, ast.Attribute) and last_name(call.func.value) not in (
            "torch",
            "F",
            "functional",
        )
        position = (0 if receiver else 1) if name == "softmax" else (1 if receiver else 2)
        out.append((call, name, _literal_dim(call, position)))
    return out


def _token_axis(dim: int | None) -> bool:
    return dim is not None and (dim == 0 or dim <= -2)


def _computes_a_loss(func: ast.FunctionDef | ast.AsyncFunctionDef, nodes: list[ast.AST]) -> bool:
    """A loss function by its name (`load_balancing_loss_func`, `aux_loss`) or what it returns (`return aux_loss`)."""
    if any(word in func.name.lower() for word in _LOSS_WORDS):
        return True
    for node in nodes:
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Name):
            if any(word in node.value.id.lower() for word in _LOSS_WORDS):
                return True
    return False


def _base_name(expr: ast.AST) -> str | None:
    """The local a tensor expression starts from: `probs`, `probs.float()`, `expert_mask.float() * mask`."""
    while True:
        if isinstance(expr, ast.Name):
            return expr.id
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
            expr = expr.func.value
        elif isinstance(expr, ast.BinOp):
            expr = expr.left
        elif isinstance(expr, ast.Subscript):
            expr = expr.value
        else:
            return None


def _summed_over_tokens(call: ast.AST) -> bool:
    """`x.sum(dim=0)`, `x.sum(0)`, `torch.sum(x, dim=0)`: a sum over the token axis."""
    if not (isinstance(call, ast.Call) and last_name(call.func) == "sum"):
        return False
    receiver = isinstance(call.func, ast.Attribute) and last_name(call.func.value) != "torch"
    return _literal_dim(call, 0 if receiver else 1) == 0


def _token_sums(nodes: list[ast.AST]) -> set[str]:
    """Locals that hold a per-expert SUM over the tokens (not a mean): accumulated with `+= p.sum(dim=0)`,
    assigned `p.sum(0)`, counted with `scatter_add_` / `index_add_` / `bincount`."""
    sums: set[str] = set()
    means: set[str] = set()
    for n in nodes:
        if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name) and isinstance(n.op, ast.Add):
            if any(_summed_over_tokens(c) for c in _walk(n.value)):
                sums.add(n.target.id)
        elif isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            value = n.value
            if _summed_over_tokens(value) or (
                isinstance(value, ast.Call)
                and last_name(value.func)
                in ("bincount", "scatter_add_", "scatter_add", "index_add_", "index_add")
            ):
                sums.add(n.targets[0].id)
            elif any(isinstance(c, ast.Call) and last_name(c.func) == "mean" for c in _walk(value)) or any(
                isinstance(b, ast.BinOp) and isinstance(b.op, ast.Div) for b in _walk(value)
            ):
                means.add(n.targets[0].id)
        elif isinstance(n, ast.Call) and last_name(n.func) in ("scatter_add_", "index_add_"):
            if isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name):
                sums.add(n.func.value.id)
    return sums - means


def _powers(expr: ast.AST) -> dict[str, int]:
    """The names a divisor is made of, with their power: `n * n` -> {n: 2}, `n.pow(2)`, `n ** 2`, `n.square()`."""
    if isinstance(expr, ast.Name):
        return {expr.id: 1}
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Mult):
        out = _powers(expr.left)
        for k, v in _powers(expr.right).items():
            out[k] = out.get(k, 0) + v
        return out
    exponent = None
    base: ast.AST | None = None
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Pow) and isinstance(expr.right, ast.Constant):
        base, exponent = expr.left, expr.right.value
    elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
        if expr.func.attr == "pow" and expr.args and isinstance(expr.args[0], ast.Constant):
            base, exponent = expr.func.value, expr.args[0].value
        elif expr.func.attr == "square" and not expr.args:
            base, exponent = expr.func.value, 2
        elif expr.func.attr in ("float", "to", "clamp", "clamp_min", "item"):
            return _powers(expr.func.value)
    elif isinstance(expr, ast.Call) and last_name(expr.func) in ("float", "max") and len(expr.args) == 1:
        return _powers(expr.args[0])
    if base is not None and type(exponent) is int:
        return {k: v * exponent for k, v in _powers(base).items()}
    return {}


def _products_of_sums(value: ast.AST, sums: set[str]) -> tuple[str, str] | None:
    """`torch.dot(a, b)`, `(a * b).sum()`, `torch.sum(a * b)` of two token sums: their names."""
    for n in _walk(value):
        pair: tuple[ast.AST, ast.AST] | None = None
        if isinstance(n, ast.Call) and last_name(n.func) in ("dot", "inner", "vdot") and len(n.args) == 2:
            pair = (n.args[0], n.args[1])
        elif isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult):
            pair = (n.left, n.right)
        if pair is None:
            continue
        names = [_base_name(p) for p in pair]
        if all(isinstance(p, (ast.Name, ast.Call)) for p in pair) and names[0] in sums and names[1] in sums:
            if names[0] != names[1]:
                return names[0], names[1]  # type: ignore[return-value]
    return None


class LoadBalancingLossForm(Rule):
    code = "NPU420"
    name = "load-balancing-loss-form"
    summary = "A load-balancing (Switch) auxiliary loss, or a patched router, normalises the router logits over another axis than the experts', or the loss drops its number-of-experts scale."
    why = (
        "The MoE auxiliary loss of transformers' `load_balancing_loss_func` and of VeOmni's eager and Triton kernels "
        "(the eager one is what an NPU run uses) is `num_experts * sum_e(f_e * P_e)`: the router logits are "
        "softmaxed over the expert axis (the last one), the top-k experts are picked on that axis, and the sum is "
        "scaled by the number of experts so that a perfectly balanced router scores 1 whatever the expert count. "
        "A softmax or top-k over the token axis (`dim=0`) makes `P_e` and the expert choice meaningless; a dropped "
        "scale makes the term `num_experts` times smaller than on the GPU path, so the routers are hardly balanced. "
        "Neither raises. Checked in every function that computes the loss itself (a softmax and a top-k over the "
        "router logits and an expert count: `one_hot`, `scatter_add_`, `bincount`), whatever its name or file: "
        "kernels, eager fallbacks, specs and generated copies; a patched router's softmax and top-k are held to the same "
        "axis where the upstream router routes over the experts. The scale may be written as `* num_experts`, "
        "`num_experts / total**2`, `* n_experts**2` or through a local. When the two statistics are kept as SUMS "
        "over the tokens (accumulated with `+= p.sum(dim=0)`, counted with `scatter_add_` / `index_add_` / "
        "`bincount`), their product (`dot(count, prob_sum)`) must be divided by the token count twice (`N * N`, "
        "`N**2`, `N.pow(2)`, through a local); divided once, the loss grows with the number of tokens."
    )
    bad = (
        Example(
            """
            import torch


            def router_balance_loss(router_logits, n_experts, k=2, attention_mask=None):
                logits = torch.cat(router_logits, dim=0)
                weights = torch.softmax(logits, dim=-1)
                _, chosen = torch.topk(weights, k, dim=-1)
                chosen_mask = torch.nn.functional.one_hot(chosen, n_experts)
                if attention_mask is None:
                    load = torch.mean(chosen_mask.float(), dim=0)
                    importance = torch.mean(weights, dim=0)
                else:
                    layers = logits.shape[0] // attention_mask.numel()
                    token_mask = attention_mask.reshape(1, -1).expand(layers, -1).reshape(-1, 1).float()
                    load = torch.sum(chosen_mask.float() * token_mask.unsqueeze(-1), dim=0) / token_mask.sum()
                    importance = torch.sum(weights, dim=0) / token_mask.sum()
                return n_experts * torch.sum(load * importance.unsqueeze(0))
            """,
            path="veomni/models/transformers/toy_moe/modeling_toy_moe.py",
            title="the padding mask weights the expert counts but not the router probabilities",
        ),
        Example(
            """
            import torch


            def balance_aux(gate_logits, n_experts, k, token_mask=None):
                counts = torch.zeros(n_experts)
                prob_total = torch.zeros(n_experts)
                seen = 0.0
                for logits in gate_logits:
                    p = torch.softmax(logits.float(), dim=-1)
                    _, top = torch.topk(p, k, dim=-1)
                    if token_mask is not None:
                        keep = token_mask.reshape(-1, 1).float()
                        prob_total += (p * keep).sum(dim=0)
                        counts.scatter_add_(0, top.reshape(-1), torch.ones_like(top, dtype=torch.float32).reshape(-1))
                        seen = seen + keep.sum()
                    else:
                        prob_total += p.sum(dim=0)
                        counts.scatter_add_(0, top.reshape(-1), torch.ones_like(top, dtype=torch.float32).reshape(-1))
                        seen = seen + p.shape[0]
                return torch.dot(counts, prob_total) * n_experts / (seen * seen)
            """,
            path="veomni/ops/kernels/load_balancing_loss/reference.py",
            title="the masked branch counts every token's expert choice",
        ),
        Example(
            """
            import torch


            def aux_balance_loss(router_logits, num_experts, top_k=2):
                logits = torch.cat(router_logits, dim=0)
                probs = torch.softmax(logits.float(), dim=0)
                _, chosen = torch.topk(probs, top_k, dim=-1)
                counts = torch.zeros(num_experts, device=logits.device)
                counts.scatter_add_(0, chosen.reshape(-1), torch.ones(chosen.numel(), device=logits.device))
                frac = counts / chosen.numel()
                return num_experts * torch.sum(frac * probs.mean(dim=0))
            """,
            path="veomni/ops/kernels/load_balancing_loss/reference.py",
            title="the router probabilities normalised over the tokens",
        ),
        Example(
            """
            import torch
            import torch.nn.functional as F


            def load_balancing_loss_func(gate_logits, num_experts=None, top_k=2, attention_mask=None):
                if gate_logits is None or not isinstance(gate_logits, tuple):
                    return 0
                concatenated = torch.cat([g for g in gate_logits], dim=0)
                routing_weights = F.softmax(concatenated, dim=-1)
                _, selected = torch.topk(routing_weights, top_k, dim=-1)
                expert_mask = F.one_hot(selected, num_experts)
                tokens_per_expert = torch.mean(expert_mask.float(), dim=0)
                router_prob_per_expert = torch.mean(routing_weights, dim=0)
                balance = torch.sum(tokens_per_expert * router_prob_per_expert.unsqueeze(0))
                return balance
            """,
            path="veomni/models/transformers/mixtral/generated/patched_modeling_mixtral_npu.py",
            title="the number-of-experts scale dropped from a generated copy",
        ),
        Example(
            """
            import torch


            class ToyMoeGate(nn.Module):
                def aux_loss(self, scores):
                    probs = scores.softmax(-1)
                    _, idx = probs.topk(self.top_k, dim=-1)
                    load = torch.bincount(idx.flatten(), minlength=self.n_routed_experts).float() / idx.numel()
                    return (load * probs.mean(0)).sum() * self.alpha
            """,
            path="veomni/models/toy_moe/modeling_toy_moe.py",
            title="a gate's own auxiliary loss, scaled by its coefficient only",
        ),
        Example(
            """
            import torch
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_moe.modeling_qwen3_moe", target_file="x.py")


            @config.override_method("Qwen3MoeTopKRouter.forward")
            def router_forward_patched(self, hidden_states):
                hidden_states = hidden_states.reshape(-1, self.hidden_dim)
                router_logits = torch.nn.functional.linear(hidden_states, self.weight)
                probs = torch.nn.functional.softmax(router_logits, dtype=torch.float, dim=0)
                top_value, top_index = torch.topk(probs, self.top_k, dim=-1)
                top_value = top_value / top_value.sum(dim=-1, keepdim=True)
                return router_logits, top_value.to(router_logits.dtype), top_index
            """,
            path="veomni/models/transformers/qwen3_moe/qwen3_moe_npu_patch_gen_config.py",
            title="a patched router normalising over the tokens",
        ),
        Example(
            """
            import torch


            def balance_aux_loss(gate_logits, num_experts, top_k):
                logits = torch.cat(gate_logits, dim=0)
                scores = torch.softmax(logits, dim=-1)
                _, picked = torch.topk(scores, top_k, dim=-1)
                chosen = torch.nn.functional.one_hot(picked, num_experts).float()
                load = chosen.mean(dim=0)
                importance = torch.mean(scores, dim=-1)
                return num_experts * torch.sum(load * importance.unsqueeze(0))
            """,
            path="veomni/models/transformers/toy_moe/toy_moe_gpu_patch_gen_config.py",
            title="the router probabilities averaged over the experts instead of the tokens",
        ),
        Example(
            """
            import torch


            def expert_balance_loss(gate_logits, num_experts, top_k):
                probs = torch.softmax(gate_logits.float(), dim=-1)
                _, picked = torch.topk(probs, top_k, dim=-1)
                hits = torch.zeros(num_experts).scatter_add_(0, picked.reshape(-1), torch.ones(picked.numel()))
                prob_sum = probs.sum(dim=0)
                tokens = gate_logits.shape[0]
                return torch.dot(hits, prob_sum) * num_experts / tokens
            """,
            path="veomni/ops/kernels/load_balancing_loss/toy_eager.py",
            title="two token sums multiplied and divided by the token count once",
        ),
    )
    good = (
        Example(
            """
            import torch


            def balance_aux(gate_logits, n_experts, k, token_mask=None):
                counts = torch.zeros(n_experts)
                prob_total = torch.zeros(n_experts)
                seen = 0.0
                for logits in gate_logits:
                    p = torch.softmax(logits.float(), dim=-1)
                    _, top = torch.topk(p, k, dim=-1)
                    if token_mask is not None:
                        keep = token_mask.reshape(-1, 1).float()
                        prob_total += (p * keep).sum(dim=0)
                        counts.scatter_add_(0, top.reshape(-1), keep.expand_as(top).reshape(-1))
                        seen = seen + keep.sum()
                    else:
                        prob_total += p.sum(dim=0)
                        counts.scatter_add_(0, top.reshape(-1), torch.ones_like(top, dtype=torch.float32).reshape(-1))
                        seen = seen + p.shape[0]
                return torch.dot(counts, prob_total) * n_experts / (seen * seen)
            """,
            path="veomni/ops/kernels/load_balancing_loss/reference.py",
            title="every statistic of the masked branch weighted by the mask",
        ),
        Example(
            """
            import torch


            def aux_balance_loss(router_logits, num_experts, top_k=2):
                logits = torch.cat(router_logits, dim=0)
                probs = torch.softmax(logits.float(), dim=-1)
                _, chosen = torch.topk(probs, top_k, dim=-1)
                counts = torch.zeros(num_experts, device=logits.device)
                counts.scatter_add_(0, chosen.reshape(-1), torch.ones(chosen.numel(), device=logits.device))
                total = chosen.shape[0]
                loss = torch.dot(counts, probs.sum(dim=0)) * (num_experts / (total * total))
                return loss
            """,
            path="veomni/ops/kernels/load_balancing_loss/reference.py",
        ),
        Example(
            """
            import torch


            class ToyMoeGate(nn.Module):
                def aux_loss(self, scores):
                    probs = scores.softmax(-1)
                    _, idx = probs.topk(self.top_k, dim=-1)
                    load = torch.bincount(idx.flatten(), minlength=self.n_routed_experts).float()
                    load = load * self.n_routed_experts / idx.numel()
                    return (load * probs.mean(0)).sum() * self.alpha
            """,
            path="veomni/models/toy_moe/modeling_toy_moe.py",
            title="the scale applied to one factor (DeepSeek's form)",
        ),
    )
    fix_safety = "No fix: the loss must be rewritten against the reference."

    requires = ("softmax", "topk")
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:  # model code, specs, generated copies and the tree's kernels
        return not ctx.source.kind.test

    def finish(self) -> None:
        ctx = self.ctx
        for func in functions_of(ctx.tree):
            self._check(func)
        for patched in patched_methods(
            ctx.tree, ctx.source.text, "forward", _ROUTING_CLASSES, path=ctx.source.path
        ):
            upstream = _axis_calls(patched.upstream)
            if not upstream or any(_token_axis(dim) for _, _, dim in upstream):
                continue
            for call, name, dim in _axis_calls(patched.func):
                if _token_axis(dim):
                    self.report(
                        call,
                        f"`{patched.cls}.forward` takes its `{name}` over axis {dim}, where upstream routes over the "
                        "experts (the last axis): every token's expert weights and choice come out wrong",
                    )

    def _per_expert_means(self, func: ast.AST, nodes: list[ast.AST]) -> None:
        """`P_e` and `f_e` are averages over the tokens: a sum or mean of the router probabilities (or of the
        expert one-hot mask) over the expert axis gives one number per token instead."""
        probs: set[str] = set()
        for node in nodes:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                if last_name(node.value.func) in ("softmax", "one_hot"):
                    probs.update(t.id for t in node.targets if isinstance(t, ast.Name))
        if not probs:
            return
        for call in nodes:
            if not (isinstance(call, ast.Call) and last_name(call.func) in ("sum", "mean")):
                continue
            receiver = isinstance(call.func, ast.Attribute) and last_name(call.func.value) != "torch"
            source = call.func.value if receiver else (call.args[0] if call.args else None)  # type: ignore[union-attr]
            if source is None or _base_name(source) not in probs:
                continue
            if any(kw.arg == "keepdim" for kw in call.keywords):  # a per-token normalisation (top-k renorm)
                continue
            dim = _literal_dim(call, 0 if receiver else 1)
            if dim == -1:
                self.report(
                    call,
                    f"`{getattr(func, 'name', '?')}` sums `{_base_name(source)}` over the experts (`dim=-1`): the "
                    "load-balancing loss averages the router probabilities and the expert choices over the tokens "
                    "(`dim=0`), one value per expert",
                )

    def _unmasked_statistics(
        self, func: ast.FunctionDef | ast.AsyncFunctionDef, nodes: list[ast.AST]
    ) -> None:
        """On the branch that has a padding mask (`if mask is not None:`), every router statistic summed over the
        tokens (the probabilities `P_e`, the expert counts `f_e`) is weighted by the mask: one left unweighted
        counts the padding tokens that the other statistics and the normaliser leave out."""
        branches: list[tuple[list[ast.stmt], set[str]]] = []
        for node in nodes:
            if not (
                isinstance(node, ast.If)
                and isinstance(node.test, ast.Compare)
                and len(node.test.ops) == 1
                and isinstance(node.test.ops[0], (ast.IsNot, ast.Is))
                and isinstance(node.test.comparators[0], ast.Constant)
                and node.test.comparators[0].value is None
                and isinstance(node.test.left, ast.Name)
                and "mask" in node.test.left.id.lower()
            ):
                continue
            body = node.body if isinstance(node.test.ops[0], ast.IsNot) else node.orelse
            if body:
                branches.append((body, {node.test.left.id}))
        if not branches:
            return
        assigns = [n for n in nodes if isinstance(n, ast.Assign)]
        probs: set[str] = set()
        changed = True
        while changed:  # what the router probabilities flow into (`probs`, `selected`, `expert_mask`)
            changed = False
            for n in assigns:
                value_names = {m.id for m in _walk(n.value) if isinstance(m, ast.Name)}
                from_router = isinstance(n.value, ast.Call) and last_name(n.value.func) in (
                    "softmax",
                    "one_hot",
                )
                if from_router or (value_names & probs and not isinstance(n.value, ast.Constant)):
                    for t in n.targets:
                        for m in _walk(t):
                            if isinstance(m, ast.Name) and m.id not in probs and m.id != "_":
                                probs.add(m.id)
                                changed = True
        if not probs:
            return
        for body, masks in branches:
            masked = set(masks)
            changed = True
            while changed:
                changed = False
                for n in assigns:
                    if {m.id for m in _walk(n.value) if isinstance(m, ast.Name)} & masked:
                        for t in n.targets:
                            if isinstance(t, ast.Name) and t.id not in masked:
                                masked.add(t.id)
                                changed = True
            for stmt in body:
                for call in _walk(stmt):
                    if not isinstance(call, ast.Call):
                        continue
                    name = last_name(call.func)
                    if name in ("sum", "mean"):
                        receiver = (
                            isinstance(call.func, ast.Attribute) and last_name(call.func.value) != "torch"
                        )
                        source = call.func.value if receiver else (call.args[0] if call.args else None)  # type: ignore[union-attr]
                        dim = _literal_dim(call, 0 if receiver else 1)
                        if source is None or dim == -1 or any(kw.arg == "keepdim" for kw in call.keywords):
                            continue
                    elif (
                        name in ("scatter_add_", "scatter_add", "index_add_", "index_add")
                        and len(call.args) >= 3
                    ):
                        source = call.args[2]
                    else:
                        continue
                    used = {m.id for m in _walk(source) if isinstance(m, ast.Name)}
                    if name in ("sum", "mean") and not used & probs:
                        continue
                    if used & masked:
                        continue
                    what = ast.unparse(source)
                    self.report(
                        call,
                        f"`{func.name}` weights its router statistics by `{sorted(masks)[0]}` on this branch, but "
                        f"accumulates `{what}` unweighted: the padding tokens enter this statistic while the others "
                        "and the normaliser leave them out, so the load-balancing loss is biased on padded batches; "
                        "weight it by the mask too",
                    )

    def _normaliser(self, func: ast.FunctionDef | ast.AsyncFunctionDef, nodes: list[ast.AST]) -> None:
        """`f_e` and `P_e` are each a mean over the N tokens: a product of their two token SUMS (`dot(count,
        prob_sum)`) must be divided by N twice (`N * N`, `N ** 2`); divided once, the loss grows with N."""
        sums = _token_sums(nodes)
        if len(sums) < 2:
            return
        assigned = {
            n.targets[0].id: n.value
            for n in nodes
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
        }
        for n in nodes:
            if not isinstance(n, (ast.Assign, ast.Return)) or n.value is None:
                continue
            pair = _products_of_sums(n.value, sums)
            if pair is None:
                continue
            powers: dict[str, int] = {}
            for div in _walk(n.value):
                if isinstance(div, ast.BinOp) and isinstance(div.op, ast.Div):
                    right = div.right
                    held = assigned.get(right.id) if isinstance(right, ast.Name) else None
                    if (
                        held is not None
                        and len(_powers(held)) == 1
                        and isinstance(held, (ast.Name, ast.BinOp, ast.Call))
                    ):
                        right = held  # `denom = total * total`
                    for k, v in _powers(right).items():
                        if _expert_count_name(ast.Name(k)) is None:
                            powers[k] = powers.get(k, 0) + v
            if not powers or max(powers.values()) != 1:
                continue
            total = max(powers, key=lambda k: powers[k])
            self.report(
                n.value,
                f"`{func.name}` multiplies two sums over the tokens (`{pair[0]}`, `{pair[1]}`) but divides by "
                f"`{total}` only once: `f_e` and `P_e` are each a mean over the tokens, so the product must be "
                f"divided by `{total}` squared, or the load-balancing loss grows with the number of tokens",
            )

    def _check(self, func: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        nodes = [
            n
            for n in _walk(func)
            if not (isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n is not func)
        ]
        calls = [n for n in nodes if isinstance(n, ast.Call)]
        softmaxes = [c for c in calls if last_name(c.func) == "softmax"]
        topks = [c for c in calls if last_name(c.func) == "topk"]
        counters = [c for c in calls if last_name(c.func) in _COUNTERS]
        if not (softmaxes and topks and counters):
            return
        if not _computes_a_loss(
            func, nodes
        ):  # an MoE block routes with the same calls and returns hidden states
            return
        for call in softmaxes:
            receiver = isinstance(call.func, ast.Attribute) and last_name(call.func.value) not in (
                "torch",
                "F",
                "functional",
            )
            dim = _literal_dim(call, 0 if receiver else 1)
            if dim is not None and (dim == 0 or dim <= -2):
                self.report(
                    call,
                    f"the router logits are softmaxed over axis {dim} in `{func.name}`, which computes the "
                    "load-balancing loss: the probabilities must be taken over the experts (`dim=-1`), as upstream "
                    "does, or the expert choice and `P_e` are meaningless",
                )
        for call in topks:
            receiver = isinstance(call.func, ast.Attribute) and last_name(call.func.value) not in ("torch",)
            dim = _literal_dim(call, 1 if receiver else 2)
            if dim is not None and (dim == 0 or dim <= -2):
                self.report(
                    call,
                    f"`{func.name}` picks the top-k on axis {dim}: the load-balancing loss picks each token's "
                    "top-k experts (`dim=-1`)",
                )
        self._per_expert_means(func, nodes)
        self._unmasked_statistics(func, nodes)
        self._normaliser(func, nodes)
        counts: set[str] = set()
        for n in nodes:
            if isinstance(n, (ast.Name, ast.Attribute)):
                name = _expert_count_name(n)
                if name is not None:
                    counts.add(name)
            elif isinstance(n, ast.arg) and _expert_count_name(ast.Name(n.arg)) is not None:
                counts.add(n.arg)
        for call in counters:
            if (
                last_name(call.func) == "one_hot"
                and len(call.args) > 1
                and isinstance(call.args[1], (ast.Name, ast.Attribute))
            ):
                counts.add(last_name(call.args[1]) or "")
        counts.discard("")
        if not counts:
            return
        returns = [
            n
            for n in nodes
            if isinstance(n, ast.Return) and n.value is not None and not isinstance(n.value, ast.Constant)
        ]
        # what the function computes: the return values and every statement that binds a local they use
        if any(
            _scaled_by(n, counts) for n in nodes if isinstance(n, (ast.Assign, ast.AugAssign, ast.Return))
        ):
            return
        loss_returns = [
            r for r in returns if not (isinstance(r.value, ast.Call) and last_name(r.value.func) == "tensor")
        ]
        if not loss_returns:
            return
        ret = max(loss_returns, key=lambda r: r.lineno)
        self.report(
            ret,
            f"`{func.name}` computes the load-balancing loss but never scales it by the number of experts "
            f"(`{sorted(counts)[0]}`): upstream returns `num_experts * sum(f_e * P_e)`, so this auxiliary term is "
            "that many times smaller",
        )
