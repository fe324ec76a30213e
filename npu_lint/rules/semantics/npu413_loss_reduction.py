"""NPU413 loss-reduction."""

from __future__ import annotations

import ast
from collections.abc import Callable

from npu_lint.core.astutil import call_name, int_value, nodes_of
from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (faster)
from npu_lint.core.diagnostics import Applicability, Edit, Fix
from npu_lint.rules.base import Example, make_fix
from npu_lint.rules.semantics._shared import (
    LossRule,
    PatchedMethod,
    direct_ce_calls,
    forwards_kwargs,
    functions_of,
    loss_calls,
)
from npu_lint.veomni import losspath
from npu_lint.veomni.constants import tree_ignore_index
from npu_lint.veomni.upstream import last_name

_CARRIED = "num_items_in_batch"


def str_is(node: ast.AST, value: str) -> bool:
    return isinstance(node, ast.Constant) and node.value == value


def _assign_targets(func: ast.AST, value: ast.AST) -> list[ast.expr]:
    for node in _walk(func):
        if isinstance(node, ast.Assign) and node.value is value:
            return list(node.targets)
    return []


def _kwargs_carriers(func: ast.AST, kwarg: str | None) -> set[str]:
    """The function's `**kwargs` name and the locals built from it (`loss_kwargs = dict(kwargs)`,
    `{**kwargs, ...}`, through local helpers' returns it is passed to), followed a few steps."""
    if kwarg is None:
        return set()
    out = {kwarg}
    for _ in range(3):
        before = len(out)
        for node in _walk(func):
            if isinstance(node, ast.Assign) and any(
                isinstance(n, ast.Name) and n.id in out for n in _walk(node.value)
            ):
                out.update(t.id for t in node.targets if isinstance(t, ast.Name))
        if len(out) == before:
            break
    return out


def _local_values(func: ast.AST, name: str) -> list[ast.expr]:
    """The values a plain local is assigned in the function (`name = value`; tuple targets are not followed)."""
    out = []
    for node in _walk(func):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            out.append(node.value)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and isinstance(node.target, ast.Name):
            if node.target.id == name and node.value is not None:
                out.append(node.value)
    return out


_PAD_WORDS = ("pad_token_id", "pad_id", "padding_idx", "pad_token_index")


def _pad_token_ref(node: ast.AST) -> ast.AST | None:
    """The padding-token id the expression reads (`self.config.text_config.pad_token_id`, `tokenizer.pad_id`)."""
    for n in _walk(node):
        name = last_name(n)
        if name is not None and name.lower() in _PAD_WORDS:
            return n
        if isinstance(n, ast.Constant) and n.value in _PAD_WORDS:  # config.get("pad_token_id")
            return n
    return None


def _kwarg_param(func: ast.FunctionDef) -> str | None:
    return func.args.kwarg.arg if func.args.kwarg is not None else None


def _divides_by_count(node: ast.AST) -> bool:
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)):
        return False
    right = node.right
    if isinstance(right, ast.Name):
        return right.id == _CARRIED
    if isinstance(right, ast.Subscript) and isinstance(right.slice, ast.Constant):
        return right.slice.value == _CARRIED
    if isinstance(right, ast.Call) and isinstance(right.func, ast.Attribute) and right.func.attr == "get":
        return (
            bool(right.args) and isinstance(right.args[0], ast.Constant) and right.args[0].value == _CARRIED
        )
    return False


def _params(func: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
    args = func.args
    return [*args.posonlyargs, *args.args, *args.kwonlyargs]


def _defaults(func: ast.FunctionDef | ast.AsyncFunctionDef) -> list[tuple[ast.arg, ast.expr]]:
    args = func.args
    positional = [*args.posonlyargs, *args.args]
    out = list(zip(positional[len(positional) - len(args.defaults) :], args.defaults))
    out += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
    return out


def _is_stub(func: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    body = [s for s in func.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    return all(isinstance(s, (ast.Pass, ast.Raise)) for s in body) or not body


def _calls_loss(func: ast.AST) -> bool:
    for node in _walk(func):
        if isinstance(node, ast.Call):
            name = call_name(node)
            low = name.lower()
            if "loss" in low or "entropy" in low or low.endswith("_ce") or low == "apply":
                return True
    return False


def _mentions_carried(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Constant) and n.value == _CARRIED for n in _walk(node))


def _has_coefficient(node: ast.AST) -> bool:
    for n in _walk(node):
        if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Mult, ast.Div)):
            return True
        if (
            isinstance(n, (ast.Name, ast.Attribute))
            and "coef" in (n.id if isinstance(n, ast.Name) else n.attr).lower()
        ):
            return True
    return False


def _aux_term(node: ast.AST) -> ast.AST | None:
    """The `aux_loss` operand of `loss + aux_loss` when nothing multiplies it (no coefficient)."""
    names = [n for n in _walk(node) if isinstance(n, (ast.Name, ast.Attribute))]
    if not any("aux_loss" in (n.id if isinstance(n, ast.Name) else n.attr) for n in names):
        return None
    if any(isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Mult, ast.Div)) for n in _walk(node)):
        return None
    if any(
        isinstance(n, (ast.Name, ast.Attribute))
        and "coef" in (n.id if isinstance(n, ast.Name) else n.attr).lower()
        for n in names
    ):
        return None
    return node


def _label_operand(node: ast.AST) -> bool:
    """The expression is a label tensor itself (`labels`, `shift_labels[..., 1:]`, `self.labels.view(-1)`), not
    something merely computed near one (`mask.to(labels.device)`)."""
    while True:
        if isinstance(node, ast.Subscript):
            node = node.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("view", "reshape", "flatten", "long", "contiguous", "int")
        ):
            node = node.func.value
        else:
            break
    if isinstance(node, ast.Name):
        return "label" in node.id
    return isinstance(node, ast.Attribute) and "label" in node.attr


def _detached_aux(node: ast.AST, detached: dict[str, int], aux_named: set[str]) -> ast.AST | None:
    """The part of ``node`` that cuts an auxiliary loss off the graph: `aux_loss.detach()`, `aux_loss.item()`,
    `aux_loss.data`, or a local bound to one of those on an earlier line."""
    for n in _walk(node):
        if isinstance(n, ast.Name) and n.id in detached and n.lineno > detached[n.id]:
            return n
        base: ast.AST | None = None
        if (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr in ("detach", "item")
        ):
            base = n.func.value
        elif isinstance(n, ast.Attribute) and n.attr == "data":
            base = n.value
        if base is not None and any(
            "aux" in (m.id if isinstance(m, ast.Name) else m.attr)
            or (isinstance(m, ast.Name) and m.id in aux_named)
            for m in _walk(base)
            if isinstance(m, (ast.Name, ast.Attribute))
        ):
            return n
    return None


def _allowlist_without_count(comp: ast.DictComp) -> bool:
    """`{k: v for k, v in kwargs.items() if k in ("ignore_index", ...)}`: keys kept from a literal list that
    does not name `num_items_in_batch`."""
    for gen in comp.generators:
        it = gen.iter
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr == "items"):
            continue
        for cond in gen.ifs:
            if (
                isinstance(cond, ast.Compare)
                and len(cond.ops) == 1
                and isinstance(cond.ops[0], ast.In)
                and isinstance(cond.comparators[0], (ast.Tuple, ast.List, ast.Set))
            ):
                keys = [e.value for e in cond.comparators[0].elts if isinstance(e, ast.Constant)]
                if keys and all(isinstance(k, str) for k in keys) and _CARRIED not in keys:
                    return True
    return False


def _reduces(call: ast.Call) -> bool:
    """A loss call that returns a reduced loss: no `reduction=` keyword (`F.cross_entropy` means by default), or
    `reduction="mean"` (`reduction="sum"`/`"none"`, or a reduction held in a variable, is not judged)."""
    name = last_name(call.func) or ""
    if name == "CrossEntropyLoss" or name.startswith("_"):
        return False  # a loss module's constructor; a private helper (may return a sum)
    for kw in call.keywords:
        if kw.arg == "reduction":
            return str_is(kw.value, "mean")
    return True


def _label_counts(func: ast.AST) -> set[str]:
    """Names that hold the labels or a value derived from them (`n = (labels != -100).sum()`)."""
    out = {a.arg for a in _params(func) if "label" in a.arg}  # type: ignore[arg-type]
    out |= {n.id for n in _walk(func) if isinstance(n, ast.Name) and "label" in n.id}
    for _ in range(3):
        before = len(out)
        for node in _walk(func):
            if isinstance(node, ast.Assign) and any(
                isinstance(n, ast.Name) and n.id in out for n in _walk(node.value)
            ):
                out.update(t.id for t in node.targets if isinstance(t, ast.Name))
        if len(out) == before:
            break
    return out


def _count_of(divisor: ast.AST, labels: set[str]) -> str | None:
    """What token count the divisor is: the global count (`num_items_in_batch`), or one of the local labels."""
    if isinstance(divisor, ast.Constant):
        return None
    for n in _walk(divisor):
        if (isinstance(n, ast.Name) and n.id == _CARRIED) or str_is(n, _CARRIED):
            return "the batch's token count"
    for n in _walk(divisor):
        if isinstance(n, ast.Name) and n.id in labels:
            return "a count of the labels"
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and "label" in n.value:
            return "a count of the labels"  # kwargs["shift_labels"]
    return None


def _fixed_count(node: ast.AST) -> str | None:
    """`None`, `1`, `1.0`: a constant put in place of the batch's token count (shown as written)."""
    if isinstance(node, ast.Constant) and (node.value is None or type(node.value) in (int, float)):
        return repr(node.value)
    return None


class LossReduction(LossRule):
    code = "NPU413"
    name = "loss-reduction"
    summary = "A loss drops `num_items_in_batch` (or gives each chunk of a chunked loss its own count), uses another ignore index than the data pipeline (a literal or the padding token id), adds the auxiliary loss without its coefficient or detached, or is reduced twice."
    why = (
        "transformers' causal-LM forwards pass `**kwargs` to `loss_function`: they carry `num_items_in_batch` "
        "(the loss is a sum over the tokens of the whole gradient-accumulation batch divided by their count), "
        "`ignore_index` and `shift_labels`. A patch whose loss call no longer forwards them averages per "
        "micro-batch instead (gradient accumulation and sequence-parallel ranks weight tokens unequally); one "
        "that divides the loss by `num_items_in_batch` after passing it to the loss divides twice."
        " Checked in every function of model code and of VeOmni's loss kernels (veomni/ops): a `num_items_in_batch` parameter never used, popped, deleted or filtered out of the kwargs, or replaced by a constant (`None`, `1`: as a keyword, a kwargs item or a dict display); an ignore index (a default, a keyword, a `.get` fallback, the label padding or fill value) other than the `IGNORE_INDEX` the tree's data contract defines (read from the tree's constants module; not judged without one); an auxiliary (load-balancing) loss added to the loss with no coefficient; a loss returned already reduced (`loss_function`, `ForCausalLMLoss`, a VeOmni loss handle, a `cross_entropy` without `reduction=` or with `'mean'`) divided again by a token count (`num_items_in_batch`, or a count of the labels, `kwargs['shift_labels']` included: a mean over the labels of a mean); the padding token id (`pad_token_id`, read directly or through a local) used as the ignore index or label fill value; `num_items_in_batch` set to None in the forwarded kwargs (`{**kwargs, 'num_items_in_batch': None}`, `kwargs['num_items_in_batch'] = None`). `num_items_in_batch` left out of an allowlist the forwarded kwargs are filtered to (`{k: v for k, v in kwargs.items() if k in (...)}` reaching the loss as `**`); an auxiliary loss added with `torch.add(loss, aux)` / `loss.add(aux)` / `loss.add_(aux)` without a coefficient (`alpha=` is one). The ignore index is also read where it enters the kwargs (`kwargs['ignore_index'] = ...`, `setdefault`, a dict display). An auxiliary loss added through `.detach()`, `.item()` or `.data` (directly or through a local), or computed under `torch.no_grad()` / `torch.inference_mode()`, is reported too: its value is logged but it sends no gradient to the routers. Labels padded with `pad(labels, ...)` and no `value=` are padded with 0, not with the tree's IGNORE_INDEX; labels compared (`==`, `!=`, `.eq`, `.ne`) with an integer other than IGNORE_INDEX (to count the valid tokens or mask the ignored ones) are reported too."
    )
    bad = (
        Example(
            """
            import torch
            import torch.nn.functional as F


            def speech_head_loss(self, hidden, target, use_fused):
                if use_fused:
                    loss = FusedLinearCrossEntropy(reduction="mean")(self.head.weight, hidden, target)
                else:
                    logits = self.head(hidden).float()
                    loss = F.cross_entropy(logits, target, reduction="sum")
                return loss
            """,
            path="veomni/models/seed_omni/decoder/toy_speech/modeling_toy_speech.py",
            title="the eager fallback sums where the fused branch takes the mean",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.llama.modeling_llama", target_file="x.py")


            @config.override_method("LlamaForCausalLM.forward")
            def llama_forcausallm_forward_patched(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
                hidden_states = self.model(input_ids=input_ids, **kwargs).last_hidden_state
                logits = self.lm_head(hidden_states)
                loss = None
                if labels is not None:
                    loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size)
                return loss, logits
            """,
            fixed="""
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.llama.modeling_llama", target_file="x.py")


            @config.override_method("LlamaForCausalLM.forward")
            def llama_forcausallm_forward_patched(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
                hidden_states = self.model(input_ids=input_ids, **kwargs).last_hidden_state
                logits = self.lm_head(hidden_states)
                loss = None
                if labels is not None:
                    loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
                return loss, logits
            """,
            path="veomni/models/transformers/llama/llama_gpu_patch_gen_config.py",
            title="the loss kwargs dropped",
        ),
        Example(
            """
            def moe_loss(self, loss, router_logits, attention_mask):
                aux_loss = load_balancing_loss_func(router_logits, self.num_experts, self.top_k, attention_mask)
                loss += aux_loss.to(loss.device)
                return loss
            """,
            path="veomni/models/transformers/toy_moe/toy_moe_gpu_patch_gen_config.py",
            title="the auxiliary loss added without its coefficient",
        ),
        Example(
            """
            def moe_loss(self, loss, outputs):
                balance = outputs.aux_loss.to(loss.device)
                loss = loss + balance
                return loss
            """,
            path="veomni/models/transformers/toy_moe/toy_moe_gpu_patch_gen_config.py",
            title="the auxiliary loss added without its coefficient, through a local",
        ),
        Example(
            """
            def moe_total_loss(self, lm_loss, gate_outputs, mask):
                balance = load_balancing_loss_func(gate_outputs, self.num_experts, self.top_k, mask)
                frozen_aux = balance.detach()
                lm_loss = lm_loss + self.router_aux_loss_coef * frozen_aux
                return lm_loss
            """,
            path="veomni/models/transformers/toy_moe/toy_moe_gpu_patch_gen_config.py",
            title="the auxiliary loss detached through a local",
        ),
        Example(
            """
            def moe_total_loss(self, loss, outputs):
                loss += self.router_aux_loss_coef * outputs.aux_loss.data.to(loss.device)
                return loss
            """,
            path="veomni/models/transformers/toy_moe/generated/patched_modeling_toy_moe_gpu.py",
            title="the auxiliary loss cut off the graph with `.data`",
        ),
        Example(
            """
            def eager_cross_entropy(logits, labels, vocab_size=None, num_items_in_batch=None, ignore_index=-100, **kwargs):
                kwargs.pop("num_items_in_batch", None)
                return fixed_cross_entropy(logits, labels, None, ignore_index, **kwargs)
            """,
            path="veomni/ops/kernels/cross_entropy/eager.py",
            title="a loss helper drops the count it receives (and pops it from the kwargs)",
        ),
        Example(
            """
            def lm_loss(self, hidden_states, labels, **kwargs):
                logits = self.lm_head(hidden_states)
                loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.vocab_size, **kwargs)
                valid = labels.ne(-100).sum()
                loss /= valid
                return loss
            """,
            path="veomni/models/transformers/toy/toy_gpu_patch_gen_config.py",
            title="an already reduced loss divided again by the count of its labels",
        ),
        Example(
            """
            def lm_loss(self, logits, labels, **kwargs):
                loss_kwargs = dict(kwargs)
                return self.loss_function(logits, labels, self.vocab_size, **{**loss_kwargs, "num_items_in_batch": None})
            """,
            path="veomni/models/transformers/toy/toy_gpu_patch_gen_config.py",
            title="the count overridden with None inside the forwarded kwargs",
        ),
        Example(
            """
            def lm_loss(self, logits, labels, **kwargs):
                wanted = {key: kwargs[key] for key in kwargs.keys()}
                loss_kwargs = {key: val for key, val in wanted.items() if key in ("ignore_index", "shift_labels")}
                return self.loss_function(logits, labels, self.vocab_size, **loss_kwargs)
            """,
            path="veomni/models/transformers/toy/toy_gpu_patch_gen_config.py",
            title="the kwargs filtered to an allowlist that leaves the count out",
        ),
        Example(
            """
            import torch


            def moe_loss(self, loss, router_outputs):
                return torch.add(loss, router_outputs.aux_loss)
            """,
            path="veomni/models/transformers/toy_moe/toy_moe_gpu_patch_gen_config.py",
            title="the auxiliary loss added with `torch.add`, without its coefficient",
        ),
    )
    good = (
        Example(
            """
            import torch.nn.functional as F


            def speech_head_loss(self, hidden, target, use_fused):
                if use_fused:
                    loss = FusedLinearCrossEntropy(reduction="sum")(self.head.weight, hidden, target)
                else:
                    logits = self.head(hidden).float()
                    loss = F.cross_entropy(logits, target, reduction="sum")
                return loss / (target != -100).sum().clamp_min(1)
            """,
            path="veomni/models/seed_omni/decoder/toy_speech/modeling_toy_speech.py",
            title="both paths sum, and the function divides once",
        ),
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.llama.modeling_llama", target_file="x.py")


            @config.override_method("LlamaForCausalLM.forward")
            def llama_forcausallm_forward_patched(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
                hidden_states = self.model(input_ids=input_ids, **kwargs).last_hidden_state
                logits = self.lm_head(hidden_states)
                loss = None
                if labels is not None:
                    loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
                return loss, logits
            """,
            path="veomni/models/transformers/llama/llama_gpu_patch_gen_config.py",
        ),
        Example(
            """
            def moe_loss(self, loss, outputs):
                balance = self.router_aux_loss_coef * outputs.aux_loss.to(loss.device)
                loss = loss + balance
                return loss
            """,
            path="veomni/models/transformers/toy_moe/toy_moe_gpu_patch_gen_config.py",
        ),
        Example(
            """
            import torch.nn.functional as F


            def token_mean_loss(logits, labels):
                total = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="sum")
                return total / labels.ne(-100).sum()
            """,
            path="veomni/models/transformers/toy/modeling_toy.py",
        ),
        Example(
            """
            def moe_total_loss(self, loss, outputs, log):
                log["aux_loss"] = outputs.aux_loss.detach().item()
                loss = loss + self.router_aux_loss_coef * outputs.aux_loss.to(loss.device)
                return loss
            """,
            path="veomni/models/transformers/toy_moe/toy_moe_gpu_patch_gen_config.py",
            title="the auxiliary loss detached only for logging",
        ),
    )
    fix_safety = (
        "Unsafe (changes the loss value, to the upstream one): `**kwargs` is added to the loss call when the "
        "patched forward takes `**kwargs`."
    )

    @classmethod
    def applies_to(cls, ctx: object) -> bool:  # model code and VeOmni's loss kernels (veomni/ops)
        return not ctx.source.kind.test  # type: ignore[attr-defined]

    def finish(self) -> None:
        self._reported_divisions: set[int] = (
            set()
        )  # divisors reported (by the forward check or the general one)
        if self.ctx.source.kind.model_code:
            super().finish()
        text = self.ctx.source.text
        if "reduction=" in text:
            self._reductions_agree()
        if not any(w in text for w in ("num_items_in_batch", "ignore_index", "aux", "loss_function")):
            return
        # the data contract is the tree's own: without a VeOmni tree that defines IGNORE_INDEX, not judged
        expected = tree_ignore_index(self.ctx.project.root)
        words = ("num_items_in_batch", "aux_loss", "loss_function") + (
            () if expected is None else ("label", "ignore_index")
        )
        for func in functions_of(self.ctx.tree, text, *words):
            self._chunk_normaliser(func)
            self._dropped_count(func)
            self._reduced_twice(func)
            if expected is not None:
                self._ignore_index(func, expected)
            self._aux_coefficient(func)
        for func in functions_of(
            self.ctx.tree, text, "detach", ".data", ".item", "no_grad", "inference_mode"
        ):
            self._aux_detached(func)

    def _reductions_agree(self) -> None:
        """The cross-entropy paths of one function (a fused branch and its eager fallback, the SP and plain
        paths) reduce the same way: a summed path where another takes the mean changes the loss's scale by the
        token count on whichever hardware takes it."""
        text = self.ctx.source.text
        for func in functions_of(self.ctx.tree, text, "reduction="):
            found: list[tuple[ast.keyword, str, str]] = []
            for node in _walk(func):
                if not isinstance(node, ast.Call):
                    continue
                name = last_name(node.func) or ""
                if "crossentropy" not in name.lower().replace("_", ""):
                    continue
                for kw in node.keywords:
                    if (
                        kw.arg == "reduction"
                        and isinstance(kw.value, ast.Constant)
                        and kw.value.value in ("mean", "sum")
                    ):
                        found.append((kw, kw.value.value, name))
            if len({value for _, value, _ in found}) < 2:
                continue
            mean = next(name for _, value, name in found if value == "mean")
            for kw, value, name in found:
                if value == "sum":
                    self.report(
                        kw.value,
                        f"`{name}` sums the token losses here, where `{mean}` in another path of `{func.name}` takes "
                        "their mean: the loss (and its gradients) scale with the number of tokens on the path that "
                        "sums, and a sequence-parallel or token-weighted reduction after it counts the tokens again; "
                        "use the same reduction on every path",
                    )

    def _dropped_count(self, func: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        params = {a.arg: a for a in _params(func)}
        carried = params.get(_CARRIED)
        if carried is not None and not _is_stub(func) and _calls_loss(func):
            read = any(
                isinstance(n, ast.Name) and n.id == _CARRIED and isinstance(n.ctx, ast.Load)
                for n in nodes_of(func, ast.Name)
            )
            if not read and not any(
                isinstance(n, ast.Call)
                and n.func is not None
                and any(k.arg is None for k in n.keywords)
                and "locals" in ast.dump(n)
                for n in nodes_of(func, ast.Call)
            ):
                calls = [
                    n
                    for n in _walk(func)
                    if isinstance(n, ast.Call)
                    and any(w in (last_name(n.func) or "").lower() for w in ("loss", "entropy"))
                ]
                where = min(calls, key=lambda n: (n.lineno, n.col_offset)) if calls else carried
                self.report(  # at the loss call that should get it (the parameter when there is none)
                    where,
                    f"`{func.name}` takes `num_items_in_batch` but never passes it on: the loss is averaged per "
                    "micro-batch instead of over the gradient-accumulation batch",
                )
        has_kwargs = func.args.kwarg is not None
        for node in _walk(func):
            if isinstance(node, ast.Call):
                for kw in node.keywords:
                    if (
                        kw.arg == _CARRIED
                        and _fixed_count(kw.value) is not None
                        and (carried is not None or has_kwargs)
                    ):
                        self.report(
                            kw.value,
                            f"`num_items_in_batch={_fixed_count(kw.value)}` replaces the count this function "
                            "received",
                        )
            if isinstance(node, ast.Dict) and (carried is not None or has_kwargs):
                for key, value in zip(node.keys, node.values):
                    if str_is(key, _CARRIED) and _fixed_count(value) is not None:
                        self.report(
                            value,
                            f"`num_items_in_batch: {_fixed_count(value)}` replaces the count this function received",
                        )
            elif (
                isinstance(node, ast.Assign)
                and (carried is not None or has_kwargs)
                and _fixed_count(node.value) is not None
                and any(isinstance(t, ast.Subscript) and str_is(t.slice, _CARRIED) for t in node.targets)
            ):
                self.report(
                    node.value,
                    f"`num_items_in_batch` is set to {_fixed_count(node.value)}: the count this function received "
                    "is lost",
                )
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Attribute)
                and node.value.func.attr == "pop"
                and node.value.args
                and _mentions_carried(node.value.args[0])
                and carried is None
            ):
                names = {t.id for t in node.targets if isinstance(t, ast.Name)}
                if names and not any(
                    isinstance(n, ast.Name) and n.id in names and isinstance(n.ctx, ast.Load)
                    for n in _walk(func)
                ):
                    self.report(node, "`num_items_in_batch` is popped from the kwargs and never passed on")
            if (
                isinstance(node, ast.Expr)
                and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Attribute)
                and node.value.func.attr == "pop"
                and node.value.args
                and _mentions_carried(node.value.args[0])
            ):
                self.report(
                    node,
                    "`num_items_in_batch` is popped from the kwargs and discarded: the loss never sees it",
                )
            elif isinstance(node, ast.Delete) and any(_mentions_carried(t) for t in node.targets):
                self.report(node, "`num_items_in_batch` is deleted from the kwargs: the loss never sees it")
            if isinstance(node, ast.DictComp) and has_kwargs and _allowlist_without_count(node):
                if self._feeds_loss(func, node):
                    self.report(
                        node,
                        "the kwargs are filtered to a list of keys without `num_items_in_batch`: the loss never "
                        "sees it and averages per micro-batch",
                    )
            if isinstance(node, (ast.DictComp, ast.ListComp, ast.GeneratorExp, ast.SetComp)):
                for gen in node.generators:
                    for cond in gen.ifs:
                        if (
                            isinstance(cond, ast.Compare)
                            and any(isinstance(op, (ast.NotEq, ast.NotIn, ast.IsNot)) for op in cond.ops)
                            and _mentions_carried(cond)
                        ):
                            self.report(
                                cond,
                                "`num_items_in_batch` is filtered out of the kwargs: the loss never sees it",
                            )

    def _reduced_twice(self, func: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """A loss returned already reduced (by `loss_function`, `ForCausalLMLoss`, a VeOmni loss handle: a mean over
        the labels, or a sum divided by `num_items_in_batch`) divided again by a token count: the labels' count, or
        `num_items_in_batch`."""
        reducing = [c for c in loss_calls(func) if _reduces(c)]
        if not reducing:
            return
        held: dict[str, str] = {}  # local -> the loss call it holds
        for node in _walk(func):
            if isinstance(node, ast.Assign) and any(node.value is c for c in reducing):
                callee = ast.unparse(node.value.func)
                for target in node.targets:
                    elts = target.elts if isinstance(target, ast.Tuple) else [target]
                    for i, elt in enumerate(elts):
                        if isinstance(elt, ast.Name) and (i == 0 or "loss" in elt.id):
                            held[elt.id] = callee
        counts = _label_counts(func)
        for node in _walk(func):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
                left, divisor = node.left, node.right
            elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Div):
                left, divisor = node.target, node.value
            else:
                continue
            if isinstance(left, ast.Name) and left.id in held:
                callee = held[left.id]
            elif any(left is c for c in reducing):
                callee = ast.unparse(left.func)  # type: ignore[attr-defined]
            else:
                continue
            what = _count_of(divisor, counts)
            if what is None or id(divisor) in self._reported_divisions:
                continue
            self._reported_divisions.add(id(divisor))
            self.report(
                node,
                f"the loss from `{callee}` is already reduced (a mean over the labels, or a sum divided by "
                f"`num_items_in_batch`); dividing it by `{ast.unparse(divisor)}` ({what}) reduces it a second "
                "time: the loss and its gradients shrink by the token count",
            )

    @staticmethod
    def _feeds_loss(func: ast.AST, comp: ast.DictComp) -> bool:
        """The filtered dict reaches a loss call as `**` (directly, or through the local it is bound to)."""
        names = {
            t.id
            for n in _walk(func)
            if isinstance(n, ast.Assign) and n.value is comp
            for t in n.targets
            if isinstance(t, ast.Name)
        }
        for call in loss_calls(func):
            for kw in call.keywords:
                if kw.arg is None and (
                    kw.value is comp or (isinstance(kw.value, ast.Name) and kw.value.id in names)
                ):
                    return True
        return False

    def _ignore_index(self, func: ast.FunctionDef | ast.AsyncFunctionDef, expected: int) -> None:
        def judge(node: ast.AST | None, what: str) -> None:
            if node is None:
                return
            shown = node
            if isinstance(node, ast.Name):  # a local holding the value (`ignore = self.config.pad_token_id`)
                values = _local_values(func, node.id)
                if len(values) == 1:
                    shown = values[0]
            value = int_value(shown)
            if value is not None and value != expected:
                self.report(
                    node,
                    f"{what} is {value}, but the data pipeline marks ignored label positions with {expected} "
                    "(IGNORE_INDEX): padding and prompt tokens would be trained on",
                )
            elif value is None and _pad_token_ref(shown) is not None:
                self.report(
                    node,
                    f"{what} is the padding token id `{ast.unparse(shown)}`, but the data pipeline marks ignored "
                    f"label positions with {expected} (IGNORE_INDEX), not with the padding token: prompt and "
                    "padding labels would be trained on (and a real token ignored)",
                )

        def judge_literal(node: ast.AST) -> None:
            value = int_value(node)
            if value is not None and value != expected:
                self.report(
                    node,
                    f"the labels are compared with {value} to find the ignored (or the counted) positions, but the "
                    f"data pipeline marks ignored label positions with {expected} (IGNORE_INDEX): padding and "
                    "prompt tokens are counted (or real tokens dropped)",
                )

        # comparisons that pick positions to rewrite (`labels[labels == 0] = -100`, `torch.where(labels == 0, ...)`,
        # `labels.masked_fill(labels == 0, ...)`): they map a value to the ignore index, the write is judged instead
        remapped: set[int] = set()
        for node in _walk(func):
            holders: list[ast.AST] = []
            if isinstance(node, ast.Assign):
                holders = [t.slice for t in node.targets if isinstance(t, ast.Subscript)]
            elif isinstance(node, ast.Call) and last_name(node.func) in (
                "where",
                "masked_fill",
                "masked_fill_",
            ):
                holders = list(node.args)
            remapped.update(id(m) for h in holders for m in _walk(h) if isinstance(m, ast.Compare))

        for arg, default in _defaults(func):
            if arg.arg == "ignore_index":
                judge(default, "the `ignore_index` default")
        label_names = {a.arg for a in _params(func) if "label" in a.arg}
        for node in _walk(func):
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Subscript) and "label" in ast.unparse(t.value) for t in node.targets
            ):
                judge(node.value, "the value written into the labels")  # labels[mask] = -1
            elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Subscript) and str_is(t.slice, "ignore_index") for t in node.targets
            ):
                judge(node.value, "`ignore_index` in the loss kwargs")  # kwargs["ignore_index"] = ...
            elif isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values):
                    if str_is(key, "ignore_index") and key is not None:
                        judge(value, "`ignore_index` in the loss kwargs")  # {**kwargs, "ignore_index": ...}
                    if isinstance(key, ast.Constant) and isinstance(key.value, str) and "label" in key.value:
                        for part in _walk(value):
                            if isinstance(part, ast.BinOp) and isinstance(part.op, ast.Mult):
                                for side in (part.left, part.right):
                                    if isinstance(side, ast.List) and len(side.elts) == 1:
                                        judge(side.elts[0], "the label fill value")
            if (
                isinstance(node, ast.Compare)
                and id(node) not in remapped
                and len(node.ops) == 1
                and isinstance(node.ops[0], (ast.Eq, ast.NotEq))
                and _label_operand(node.left)
            ):
                judge_literal(node.comparators[0])  # (labels != -1).sum(), labels == 0
            if not isinstance(node, ast.Call):
                continue
            if (
                isinstance(node.func, ast.Attribute)
                and node.func.attr in ("ne", "eq")
                and len(node.args) == 1
                and _label_operand(node.func.value)
            ):
                judge_literal(node.args[0])  # labels.ne(0).sum()
            for kw in node.keywords:
                if kw.arg == "ignore_index":
                    judge(kw.value, "`ignore_index`")
            callee = call_name(node)
            if callee == "get" and len(node.args) == 2 and str_is(node.args[0], "ignore_index"):
                judge(node.args[1], "the `ignore_index` fallback")
            elif callee == "setdefault" and len(node.args) == 2 and str_is(node.args[0], "ignore_index"):
                judge(node.args[1], "`ignore_index` in the loss kwargs")
            elif callee == "pad" and node.args and "label" in ast.unparse(node.args[0]).split("[")[0]:
                value = next((kw.value for kw in node.keywords if kw.arg == "value"), None)
                if value is None and len(node.args) >= 4:
                    value = node.args[3]
                mode = next((kw.value for kw in node.keywords if kw.arg == "mode"), None)
                if mode is None and len(node.args) >= 3:
                    mode = node.args[2]
                if value is not None:
                    judge(value, "the label padding value")
                elif (mode is None or str_is(mode, "constant")) and expected != 0 and len(node.args) >= 2:
                    self.report(
                        node,
                        f"the labels are padded without a `value=`: `pad` fills with 0, but the data pipeline "
                        f"marks ignored label positions with {expected} (IGNORE_INDEX): the padded position is "
                        "trained toward token 0 and counted in the token total",
                    )
            elif callee in ("masked_fill", "masked_fill_") and len(node.args) == 2:
                base = node.func.value if isinstance(node.func, ast.Attribute) else None
                if base is not None and "label" in ast.unparse(base).split("[")[0]:
                    judge(node.args[1], "the masked label value")
            elif callee in ("full", "full_like") and any(
                isinstance(t, ast.Name) and "label" in t.id for t in _assign_targets(func, node)
            ):
                fill = (
                    node.args[1]
                    if len(node.args) >= 2
                    else next((k.value for k in node.keywords if k.arg == "fill_value"), None)
                )
                judge(fill, "the label fill value")
        del label_names

    def _chunk_normaliser(self, func: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """A chunked loss whose chunks are each given their own normaliser (or none): a sum of chunk means."""
        seen = self.ctx.memo.setdefault((self.code, "chunk"), set())
        assert isinstance(seen, set)
        for value, what in losspath.chunk_normaliser_faults(func):
            if id(value) in seen:
                continue
            seen.add(id(value))
            self.report(
                value,
                f"each chunk of this loss is normalised by {what}: every chunk becomes a mean over its own "
                "tokens and the summed chunks are a sum of means, not the batch's per-token mean; give every "
                "chunk the whole batch's `num_items_in_batch`",
            )

    def _aux_coefficient(self, func: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        scaled: set[str] = set()  # locals that hold a scaled value (`aux_loss = coef * (...)`)
        unscaled: set[str] = set()
        for n in _walk(func):
            if isinstance(n, ast.Assign):
                names = {t.id for t in n.targets if isinstance(t, ast.Name)}
                (scaled if _has_coefficient(n.value) else unscaled).update(names)
        self._scaled = scaled - unscaled
        # locals that hold the bare auxiliary loss under another name (`balance = aux_loss.to(loss.device)`)
        aux_locals: set[str] = set()
        for n in _walk(func):
            if (
                isinstance(n, ast.Assign)
                and len(n.targets) == 1
                and isinstance(n.targets[0], ast.Name)
                and "aux_loss" not in n.targets[0].id
                and "loss" not in n.targets[0].id
                and _aux_term(n.value) is not None
            ):
                aux_locals.add(n.targets[0].id)
        aux_locals -= scaled

        def term(side: ast.AST) -> ast.AST | None:
            if isinstance(side, ast.Name) and side.id in aux_locals:
                return side
            return _aux_term(side)

        for node in _walk(func):
            if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add):
                target = ast.unparse(node.target)
                if "loss" in target and "aux" not in target and term(node.value) is not None:
                    self._report_aux(node.value)
            elif isinstance(node, (ast.Assign, ast.Expr, ast.Return)) and isinstance(node.value, ast.Call):
                # `loss = torch.add(loss, aux)`, `loss = loss.add(aux)`, `loss.add_(aux)`, `return torch.add(...)`
                call = node.value
                callee = call.func.attr if isinstance(call.func, ast.Attribute) else ""
                if callee not in ("add", "add_") or call.keywords:
                    continue
                operands = [*call.args]
                if isinstance(call.func, ast.Attribute) and not (
                    isinstance(call.func.value, ast.Name) and call.func.value.id == "torch"
                ):
                    operands.insert(0, call.func.value)
                if len(operands) != 2:
                    continue
                target = (
                    " ".join(ast.unparse(t) for t in node.targets)
                    if isinstance(node, ast.Assign)
                    else ast.unparse(operands[0])
                )
                sides = [ast.unparse(o) for o in operands]
                if "loss" in target and "aux" not in target and any("aux" not in t for t in sides):
                    for side in operands:
                        if term(side) is not None and "aux" not in ast.unparse(
                            operands[1] if side is operands[0] else operands[0]
                        ):
                            self._report_aux(side)
            elif (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.BinOp)
                and isinstance(node.value.op, ast.Add)
            ):
                target = " ".join(ast.unparse(t) for t in node.targets)
                if "loss" in target and "aux" not in target:
                    for side in (node.value.left, node.value.right):
                        if term(side) is not None and "aux" not in ast.unparse(
                            node.value.right if side is node.value.left else node.value.left
                        ):
                            self._report_aux(side)

    def _aux_detached(self, func: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """An auxiliary loss added to the loss through `.detach()` / `.item()` / `.data`: its value is logged but
        it sends no gradient to the routers."""
        # locals holding a detached auxiliary loss (`balance = aux_loss.detach()`) -> the line they are bound on
        detached: dict[str, int] = {}
        aux_named: set[str] = (
            set()
        )  # locals holding a load-balancing loss (`b = load_balancing_loss_func(...)`)
        for n in nodes_of(func, ast.Assign):
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call):
                callee = last_name(n.value.func) or ""
                if "balanc" in callee or "aux" in callee:
                    aux_named |= {t.id for t in n.targets if isinstance(t, ast.Name)}

        def bind(targets: list[ast.expr], line: int, wanted: Callable[[str], bool]) -> None:
            for t in targets:
                if isinstance(t, ast.Name) and wanted(t.id):
                    detached[t.id] = min(line, detached.get(t.id, line))

        # computed where no graph is recorded: `with torch.no_grad(): aux_loss = ...`
        for n in nodes_of(func, ast.With, ast.AsyncWith):
            if isinstance(n, (ast.With, ast.AsyncWith)) and any(
                isinstance(item.context_expr, ast.Call)
                and last_name(item.context_expr.func) in ("no_grad", "inference_mode")
                for item in n.items
            ):
                for inner in n.body:
                    for m in nodes_of(inner, ast.Assign):
                        if isinstance(m, ast.Assign):
                            bind(m.targets, m.lineno, lambda name: "aux" in name or name in aux_named)
        for n in nodes_of(func, ast.Assign):
            if isinstance(n, ast.Assign) and _detached_aux(n.value, detached, aux_named) is not None:
                bind(n.targets, n.lineno, lambda name: "aux" in name or "loss" not in name)
        for node in nodes_of(func, ast.AugAssign, ast.Assign):
            sides: list[ast.AST] = []
            if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add):
                target = ast.unparse(node.target)
                sides = [node.value]
            elif (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.BinOp)
                and isinstance(node.value.op, ast.Add)
            ):
                target = " ".join(ast.unparse(t) for t in node.targets)
                sides = [node.value.left, node.value.right]
            else:
                continue
            if "loss" not in target or "aux" in target:
                continue
            for side in sides:
                hit = _detached_aux(side, detached, aux_named)
                if hit is not None:
                    self.report(
                        hit,
                        "the auxiliary (load-balancing) loss is detached before it is added to the loss: its "
                        "value is logged but it sends no gradient, so the routers are never balanced",
                    )

    def _report_aux(self, node: ast.AST) -> None:
        if isinstance(node, ast.Name) and node.id in self._scaled:
            return
        self.report(
            node,
            "the auxiliary (load-balancing) loss is added without its coefficient (`router_aux_loss_coef * "
            "aux_loss` upstream): it dominates the language-model loss",
        )

    def check(self, patched: PatchedMethod) -> None:
        func = patched.func
        upstream_forwards = any(forwards_kwargs(c) for c in loss_calls(patched.upstream))
        calls = loss_calls(func)
        if upstream_forwards:
            kwarg = _kwarg_param(func)
            carriers = _kwargs_carriers(func, kwarg)
            for call in calls:
                if any(kw.arg == _CARRIED for kw in call.keywords):
                    continue
                if forwards_kwargs(call) and (
                    kwarg is None
                    or any(
                        kw.arg is None
                        and not (isinstance(kw.value, ast.Name) and kw.value.id not in carriers)
                        for kw in call.keywords
                    )
                ):
                    continue
                # at the end of the call, where the fix inserts `**kwargs`
                last = [*call.args, *(kw.value for kw in call.keywords)]
                where = max(last, key=lambda n: (n.lineno, n.col_offset)) if last else call
                self.report(
                    where if where.lineno > call.lineno else call,
                    f"`{patched.cls}.forward` upstream forwards `**kwargs` (num_items_in_batch, ignore_index) to "
                    "its loss; this loss call drops them: the loss is averaged per micro-batch",
                    self._fix(call, kwarg),
                )
            if not calls:
                for call in direct_ce_calls(func):
                    if not any(kw.arg == _CARRIED for kw in call.keywords):
                        self.report(
                            call,
                            f"`{patched.cls}.forward` computes cross-entropy without the `num_items_in_batch` the "
                            "upstream loss receives: the loss is averaged per micro-batch",
                        )
        if any(forwards_kwargs(c) or any(kw.arg == _CARRIED for kw in c.keywords) for c in calls):
            for node in _walk(func):
                if _divides_by_count(node) and id(node.right) not in self._reported_divisions:  # type: ignore[attr-defined]
                    self._reported_divisions.add(id(node.right))  # type: ignore[attr-defined]
                    self.report(
                        node,
                        "the loss already receives `num_items_in_batch` and divides by it; dividing again "
                        "scales the loss down once more",
                    )

    def _fix(self, call: ast.Call, kwarg: str | None) -> Fix | None:
        if kwarg is None:
            return None
        src = self.ctx.source
        start, end = src.node_range(call)
        text = src.text[start:end]
        close = text.rstrip().rfind(")")
        if close < 0:
            return None
        head = text[:close].rstrip()
        sep = "" if head.endswith(("(", ",")) else ","
        pos = start + len(head)
        insert = f"{sep} **{kwarg}" if not head.endswith("(") else f"**{kwarg}"
        if head.endswith(","):
            insert = f" **{kwarg},"
        return make_fix(
            f"Forward `**{kwarg}` to the loss",
            [Edit(pos, pos, insert)],
            Applicability.UNSAFE,
            "the loss becomes a sum over the batch's tokens divided by num_items_in_batch, as upstream",
        )
