"""NPU422 loss-logits-upcast."""

from __future__ import annotations

import ast
from pathlib import PurePath

from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (memoised per file)
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.semantics._shared import functions_of, params_of
from npu_lint.veomni.upstream import last_name

# what turns vocabulary logits into a loss or log-probabilities: the softmax family and the cross-entropy helpers
_CONSUMERS = {"cross_entropy", "log_softmax", "logsumexp", "nll_loss", "softmax", "fixed_cross_entropy"}
_CASTS_UP = {"float", "double"}
_FP32 = {"float32", "float", "float64", "double"}
# names of logits that are not vocabulary logits (routing, attention, classification scores)
_OTHER_LOGITS = ("router", "gate", "expert", "attn", "attention", "score")


def _is_projection(node: ast.AST) -> bool:
    """`F.linear(h, w)`, `h @ w.t()`, `torch.matmul(h, w.T)`, `self.lm_head(h)`: hidden states to vocabulary logits."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
        return True
    if isinstance(node, ast.Call):
        name = last_name(node.func)
        return name in ("linear", "matmul", "mm") or (name is not None and name.endswith("lm_head"))
    return False


def _is_upcast(node: ast.AST) -> bool:
    """A call that leaves fp32: `.float()`, `.double()`, `.to(torch.float32)`, `.type(torch.float32)`, or a
    consumer asked for an fp32 result (`dtype=torch.float32`)."""
    if not isinstance(node, ast.Call):
        return False
    name = last_name(node.func)
    if name in _CASTS_UP and isinstance(node.func, ast.Attribute) and not node.args:
        return True
    candidates = [kw.value for kw in node.keywords if kw.arg == "dtype"]
    if name in ("to", "type"):
        candidates.extend(node.args)
    return any(last_name(c) in _FP32 for c in candidates)


def _vocab_name(name: str) -> bool:
    lowered = name.lower()
    return "logits" in lowered and not any(word in lowered for word in _OTHER_LOGITS)


class _Flow:
    """Which locals of a function hold vocabulary logits still in the projection's dtype, line by line."""

    def __init__(self, func: ast.FunctionDef | ast.AsyncFunctionDef, raw_params: set[str]) -> None:
        self.func = func
        self.raw_params = raw_params
        self.assigns: dict[str, list[tuple[int, ast.expr]]] = {}
        for node in _walk(func):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if isinstance(target, ast.Name):
                    self.assigns.setdefault(target.id, []).append((node.lineno, node.value))
                elif isinstance(target, ast.Tuple):  # `loss, logits = f(logits)`: the names leave the flow
                    for elt in target.elts:
                        if isinstance(elt, ast.Name):
                            self.assigns.setdefault(elt.id, []).append((node.lineno, ast.Constant(None)))
        self.memo: dict[tuple[str, int], ast.AST | None] = {}

    def raw_at(self, name: str, line: int, depth: int = 0) -> ast.AST | None:
        """The projection that ``name`` holds uncast at ``line`` (None when it holds fp32 or no logits)."""
        key = (name, line)
        if key in self.memo or depth > 12:
            return self.memo.get(key)
        self.memo[key] = None
        bindings = [(ln, v) for ln, v in self.assigns.get(name, []) if ln < line]
        if not bindings:
            found: ast.AST | None = ast.Name(name) if name in self.raw_params else None
        else:
            ln, value = max(bindings, key=lambda b: b[0])
            found = self.raw_expr(value, ln, depth + 1)
        self.memo[key] = found
        return found

    def raw_expr(self, value: ast.AST, line: int, depth: int = 0) -> ast.AST | None:
        """Whether ``value`` evaluates to uncast vocabulary logits: a projection, or an expression over such a
        local (a view, a division by the temperature), with no upcast on the way."""
        if any(_is_upcast(n) for n in _walk(value)):
            return None
        for node in _walk(value):
            if isinstance(node, ast.Call) and last_name(node.func) in _CONSUMERS:
                return None  # a loss or probabilities, not logits
        if _is_projection(value):
            return value
        if isinstance(value, (ast.Name, ast.Attribute, ast.Subscript, ast.Call, ast.BinOp)):
            for node in _walk(value):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                    hit = self.raw_at(node.id, line, depth)
                    if hit is not None:
                        return hit
        return None


def _consumer_input(call: ast.Call) -> ast.expr | None:
    """The tensor a consumer call normalises: its receiver (`x.log_softmax(-1)`) or first argument."""
    if isinstance(call.func, ast.Attribute) and not call.args and not isinstance(call.func.value, ast.Name):
        return call.func.value
    if isinstance(call.func, ast.Attribute) and isinstance(
        call.func.value, (ast.Name, ast.Subscript, ast.Call)
    ):
        owner = last_name(call.func.value)
        if owner not in ("F", "functional", "torch", "nn", "special"):
            return call.func.value
    if call.args:
        return call.args[0]
    return next((kw.value for kw in call.keywords if kw.arg in ("input", "logits")), None)


class LossLogitsUpcast(Rule):
    code = "NPU422"
    name = "loss-logits-upcast"
    summary = "A loss kernel or loss wrapper computes the softmax or cross-entropy of vocabulary logits in the projection's dtype, where upstream upcasts them to fp32 first."
    why = (
        "transformers' causal-LM loss upcasts the logits to fp32 before the cross-entropy (`logits.float()`), and "
        "VeOmni's own loss kernels (the chunked loss that backs the NPU path, the eager fallback's fused-linear "
        "branch, the log-prob and distillation kernels) do the same on every chunk they project. A log-softmax over "
        "a vocabulary of 100k+ entries in bf16 loses the small probabilities: the loss is biased and noisy and its "
        "gradient no longer matches the GPU (Liger, eager fp32) path, with no error. Reported in the tree's own "
        "loss code (not in upstream-derived model files, whose loss goes through `loss_function`): where logits "
        "projected from hidden states (`F.linear`, `@`, `matmul`, an `lm_head` call) reach a softmax, "
        "log-softmax, log-sum-exp or cross-entropy, directly or through a same-file helper, with no upcast on the "
        "way; and where a loss wrapper named like transformers' (`ForCausalLMLoss`, `For...Loss`) hands its "
        "`logits` parameter to the cross-entropy without upcasting it."
    )
    bad = (
        Example(
            """
            import torch.nn.functional as F


            def chunked_ce(hidden_states, weight, labels, chunk_size=1024):
                total = 0.0
                for h, y in zip(hidden_states.split(chunk_size), labels.split(chunk_size)):
                    chunk_logits = F.linear(h, weight)
                    total = total + F.cross_entropy(chunk_logits, y, reduction="sum")
                return total
            """,
            path="veomni/ops/kernels/cross_entropy/chunked.py",
            title="a chunked loss kernel projects and takes the cross-entropy in bf16",
        ),
        Example(
            """
            def _token_log_probs(logits, labels):
                return logits.log_softmax(dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)


            def fused_log_probs(hidden, weight, labels, temperature=1.0):
                logits = hidden @ weight.t()
                logits = logits / temperature
                return _token_log_probs(logits, labels)
            """,
            path="veomni/ops/kernels/cross_entropy/log_probs.py",
            title="through a local helper, after a temperature scale",
        ),
        Example(
            """
            import torch


            def streamed_loss(hidden, lm_weight, labels, step=4096):
                criterion = torch.nn.CrossEntropyLoss(reduction="sum", ignore_index=-100)
                total = hidden.new_zeros(())
                for start in range(0, hidden.size(0), step):
                    part_logits = torch.matmul(hidden[start : start + step], lm_weight.T)
                    total += criterion(part_logits, labels[start : start + step])
                return total
            """,
            path="veomni/ops/kernels/cross_entropy/streamed.py",
            title="through a `CrossEntropyLoss` module held in a local",
        ),
        Example(
            """
            from transformers.loss.loss_utils import fixed_cross_entropy


            def ForTokenClassificationLoss(logits, labels, num_labels, num_items_in_batch=None, **kwargs):
                logits = logits.view(-1, num_labels)
                labels = labels.view(-1).to(logits.device)
                return fixed_cross_entropy(logits, labels, num_items_in_batch, **kwargs)
            """,
            path="veomni/utils/loss_wrappers.py",
            title="a loss wrapper that no longer upcasts its logits",
        ),
    )
    good = (
        Example(
            """
            import torch
            import torch.nn.functional as F


            def chunked_ce(hidden_states, weight, labels, chunk_size=1024):
                total = 0.0
                for h, y in zip(hidden_states.split(chunk_size), labels.split(chunk_size)):
                    chunk_logits = F.linear(h, weight).to(torch.float32)
                    total = total + F.cross_entropy(chunk_logits, y, reduction="sum")
                return total


            def fused_log_probs(hidden, weight, labels, temperature=1.0):
                logits = hidden @ weight.t()
                logits = (logits / temperature).float()
                return logits.log_softmax(dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)


            def ForTokenClassificationLoss(logits, labels, num_labels, num_items_in_batch=None, **kwargs):
                logits = logits.view(-1, num_labels).float()
                return fixed_cross_entropy(logits, labels.view(-1), num_items_in_batch, **kwargs)
            """,
            path="veomni/ops/kernels/cross_entropy/chunked.py",
        ),
        Example(
            """
            import torch


            def route(hidden, weight, top_k):
                router_logits = hidden @ weight.t()
                probs = torch.softmax(router_logits, dim=-1)
                return torch.topk(probs, top_k, dim=-1)
            """,
            path="veomni/ops/kernels/moe/router.py",
            title="router logits are not vocabulary logits",
        ),
    )
    fix_safety = (
        "No fix: where the upcast belongs (before or after a temperature scale) is the kernel's choice."
    )

    requires = ("logits", ("linear", "@", "matmul", "lm_head", "Loss"))
    node_types = ()

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        """The tree's own code (kernels, loss utilities), not tests and not upstream-derived model files."""
        kind = ctx.source.kind
        if kind.test or kind.generated or kind.spec:
            return False
        parts = PurePath(ctx.source.path.replace("\\", "/")).parts
        return "veomni" in parts and "transformers" not in parts

    def finish(self) -> None:
        ctx = self.ctx
        funcs = functions_of(ctx.tree)
        by_name = {f.name: f for f in funcs}
        reported: set[int] = set()
        for func in reversed(funcs):  # nested functions first: a finding names the function that projects
            if func.name.endswith("Loss") and "logits" in params_of(func):  # type: ignore[arg-type]
                self._wrapper(func, reported)
            flow = _Flow(func, set())
            modules = {  # `loss_fct = nn.CrossEntropyLoss(...)`: calling the local is a cross-entropy
                t.id
                for n in _walk(func)
                if isinstance(n, ast.Assign)
                and isinstance(n.value, ast.Call)
                and last_name(n.value.func) in ("CrossEntropyLoss", "NLLLoss")
                for t in n.targets
                if isinstance(t, ast.Name)
            }
            for node in _walk(func):
                if not isinstance(node, ast.Call):
                    continue
                name = last_name(node.func)
                if isinstance(node.func, ast.Name) and node.func.id in modules:
                    name = "cross_entropy"
                if name in _CONSUMERS or (name is not None and "cross_entropy" in name):
                    if _is_upcast(node):
                        continue
                    arg = _consumer_input(node)
                    if isinstance(arg, ast.Name) and not _vocab_name(arg.id):
                        continue
                    proj = None if arg is None else flow.raw_expr(arg, node.lineno)
                    if proj is not None and id(node) not in reported:
                        reported.add(id(node))
                        self.report(
                            node,
                            f"`{name}` works on logits projected in `{func.name}` without an upcast: the "
                            "softmax over the vocabulary runs in the projection's dtype (bf16), where upstream "
                            "upcasts the logits with `.float()` first",
                        )
                elif name in by_name and by_name[name] is not func:
                    self._helper_call(func, flow, node, by_name[name], reported)

    def _helper_call(
        self, func: ast.AST, flow: _Flow, call: ast.Call, helper: ast.AST, reported: set[int]
    ) -> None:
        """Uncast logits handed to a same-file helper that normalises that parameter without upcasting it."""
        params = params_of(helper)  # type: ignore[arg-type]
        for i, arg in enumerate(call.args):
            if i >= len(params) or not isinstance(arg, ast.Name) or not _vocab_name(arg.id):
                continue
            if flow.raw_expr(arg, call.lineno) is None:
                continue
            inner = _Flow(helper, {params[i]})  # type: ignore[arg-type]
            for node in _walk(helper):
                if isinstance(node, ast.Call) and last_name(node.func) in _CONSUMERS and not _is_upcast(node):
                    target = _consumer_input(node)
                    if target is not None and inner.raw_expr(target, node.lineno) is not None:
                        if id(call) not in reported:
                            reported.add(id(call))
                            self.report(
                                call,
                                f"`{arg.id}` is projected in `{getattr(func, 'name', '?')}` and handed uncast to "
                                f"`{getattr(helper, 'name', '?')}`, which takes its `{last_name(node.func)}`: the "
                                "softmax over the vocabulary runs in bf16, where upstream upcasts the logits first",
                            )
                        return

    def _wrapper(self, func: ast.FunctionDef | ast.AsyncFunctionDef, reported: set[int]) -> None:
        """A `For...Loss` wrapper must upcast its `logits` parameter before handing it on."""
        flow = _Flow(func, {"logits"})
        for node in _walk(func):
            if not isinstance(node, ast.Call) or _is_upcast(node):
                continue
            name = last_name(node.func)
            if name is None or not (name in _CONSUMERS or "cross_entropy" in name or name.endswith("_fn")):
                continue
            args = [*node.args, *(kw.value for kw in node.keywords if kw.arg == "logits")]
            for arg in args:
                if isinstance(arg, ast.Name) and arg.id == "logits" and flow.raw_at("logits", node.lineno):
                    if id(node) not in reported:
                        reported.add(id(node))
                        self.report(
                            node,
                            f"`{func.name}` hands its `logits` to `{name}` without upcasting them: upstream's "
                            "loss wrappers compute the cross-entropy on `logits.float()`",
                        )
                    return
