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
    loss_calls,
)

_CARRIED = "num_items_in_batch"


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


class LossReduction(LossRule):
    code = "NPU413"
    name = "loss-reduction"
    summary = "A patched causal-LM loss drops the `num_items_in_batch`/`ignore_index` the upstream forward passes, or divides twice."
    why = (
        "transformers' causal-LM forwards pass `**kwargs` to `loss_function`: they carry `num_items_in_batch` "
        "(the loss is a sum over the tokens of the whole gradient-accumulation batch divided by their count), "
        "`ignore_index` and `shift_labels`. A patch whose loss call no longer forwards them averages per "
        "micro-batch instead (gradient accumulation and sequence-parallel ranks weight tokens unequally); one "
        "that divides the loss by `num_items_in_batch` after passing it to the loss divides twice."
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
    )
    fix_safety = (
        "Unsafe (changes the loss value, to the upstream one): `**kwargs` is added to the loss call when the "
        "patched forward takes `**kwargs`."
    )

    def check(self, patched: PatchedMethod) -> None:
        func = patched.func
        upstream_forwards = any(forwards_kwargs(c) for c in loss_calls(patched.upstream))
        calls = loss_calls(func)
        if upstream_forwards:
            kwarg = _kwarg_param(func)
            for call in calls:
                if forwards_kwargs(call) or any(kw.arg == _CARRIED for kw in call.keywords):
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
