"""NPU413 loss-reduction."""

from __future__ import annotations

import ast

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
from npu_lint.veomni.constants import tree_ignore_index

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


def _int_literal(node: ast.AST | None) -> int | None:
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
    ):
        value = node.operand.value
        return -value if type(value) is int else None
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


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
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
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


class LossReduction(LossRule):
    code = "NPU413"
    name = "loss-reduction"
    summary = "A loss drops `num_items_in_batch`, uses another ignore index than the data pipeline, adds the auxiliary loss without its coefficient, or divides twice."
    why = (
        "transformers' causal-LM forwards pass `**kwargs` to `loss_function`: they carry `num_items_in_batch` "
        "(the loss is a sum over the tokens of the whole gradient-accumulation batch divided by their count), "
        "`ignore_index` and `shift_labels`. A patch whose loss call no longer forwards them averages per "
        "micro-batch instead (gradient accumulation and sequence-parallel ranks weight tokens unequally); one "
        "that divides the loss by `num_items_in_batch` after passing it to the loss divides twice."
        " Checked in every function of model code and of VeOmni's loss kernels (veomni/ops): a `num_items_in_batch` parameter never used, popped, deleted or filtered out of the kwargs, or replaced by `None`; an ignore index (a default, a keyword, a `.get` fallback, the label padding or fill value) other than the `IGNORE_INDEX` the tree's data contract defines (read from the tree's constants module; not judged without one); an auxiliary (load-balancing) loss added to the loss with no coefficient."
    )
    bad = (
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
            def eager_cross_entropy(logits, labels, vocab_size=None, num_items_in_batch=None, ignore_index=-100, **kwargs):
                kwargs.pop("num_items_in_batch", None)
                return fixed_cross_entropy(logits, labels, None, ignore_index, **kwargs)
            """,
            path="veomni/ops/kernels/cross_entropy/eager.py",
            title="a loss helper drops the count it receives (and pops it from the kwargs)",
        ),
    )
    good = (
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
    )
    fix_safety = (
        "Unsafe (changes the loss value, to the upstream one): `**kwargs` is added to the loss call when the "
        "patched forward takes `**kwargs`."
    )

    @classmethod
    def applies_to(cls, ctx: object) -> bool:  # model code and VeOmni's loss kernels (veomni/ops)
        return not ctx.source.kind.test  # type: ignore[attr-defined]

    def finish(self) -> None:
        if self.ctx.source.kind.model_code:
            super().finish()
        text = self.ctx.source.text
        if "num_items_in_batch" not in text and "ignore_index" not in text and "aux_loss" not in text:
            return
        # the data contract is the tree's own: without a VeOmni tree that defines IGNORE_INDEX, not judged
        expected = tree_ignore_index(self.ctx.project.root)
        words = ("num_items_in_batch", "aux_loss") + (() if expected is None else ("label", "ignore_index"))
        for func in functions_of(self.ctx.tree, text, *words):
            self._dropped_count(func)
            if expected is not None:
                self._ignore_index(func, expected)
            self._aux_coefficient(func)

    def _dropped_count(self, func: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        params = {a.arg: a for a in _params(func)}
        carried = params.get(_CARRIED)
        if carried is not None and not _is_stub(func) and _calls_loss(func):
            read = any(
                isinstance(n, ast.Name) and n.id == _CARRIED and isinstance(n.ctx, ast.Load)
                for n in _walk(func)
            )
            if not read and not any(
                isinstance(n, ast.Call)
                and n.func is not None
                and any(k.arg is None for k in n.keywords)
                and "locals" in ast.dump(n)
                for n in _walk(func)
            ):
                self.report(
                    carried,
                    f"`{func.name}` takes `num_items_in_batch` but never passes it on: the loss is averaged per "
                    "micro-batch instead of over the gradient-accumulation batch",
                )
        has_kwargs = func.args.kwarg is not None
        for node in _walk(func):
            if isinstance(node, ast.Call):
                for kw in node.keywords:
                    if (
                        kw.arg == _CARRIED
                        and isinstance(kw.value, ast.Constant)
                        and kw.value.value is None
                        and (carried is not None or has_kwargs)
                    ):
                        self.report(
                            kw.value, "`num_items_in_batch=None` replaces the count this function received"
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
            elif isinstance(node, (ast.DictComp, ast.ListComp, ast.GeneratorExp, ast.SetComp)):
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

    def _ignore_index(self, func: ast.FunctionDef | ast.AsyncFunctionDef, expected: int) -> None:
        def judge(node: ast.AST | None, what: str) -> None:
            value = _int_literal(node)
            if value is not None and value != expected and node is not None:
                self.report(
                    node,
                    f"{what} is {value}, but the data pipeline marks ignored label positions with {expected} "
                    "(IGNORE_INDEX): padding and prompt tokens would be trained on",
                )

        for arg, default in _defaults(func):
            if arg.arg == "ignore_index":
                judge(default, "the `ignore_index` default")
        label_names = {a.arg for a in _params(func) if "label" in a.arg}
        for node in _walk(func):
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Subscript) and "label" in ast.unparse(t.value) for t in node.targets
            ):
                judge(node.value, "the value written into the labels")  # labels[mask] = -1
            elif isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values):
                    if isinstance(key, ast.Constant) and isinstance(key.value, str) and "label" in key.value:
                        for part in _walk(value):
                            if isinstance(part, ast.BinOp) and isinstance(part.op, ast.Mult):
                                for side in (part.left, part.right):
                                    if isinstance(side, ast.List) and len(side.elts) == 1:
                                        judge(side.elts[0], "the label fill value")
            if not isinstance(node, ast.Call):
                continue
            for kw in node.keywords:
                if kw.arg == "ignore_index":
                    judge(kw.value, "`ignore_index`")
            callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if callee == "get" and len(node.args) == 2 and str_is(node.args[0], "ignore_index"):
                judge(node.args[1], "the `ignore_index` fallback")
            elif callee == "pad" and node.args and "label" in ast.unparse(node.args[0]).split("[")[0]:
                for kw in node.keywords:
                    if kw.arg == "value":
                        judge(kw.value, "the label padding value")
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
                and "aux" not in n.targets[0].id
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
                self.report(
                    call,
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
                if _divides_by_count(node):
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
