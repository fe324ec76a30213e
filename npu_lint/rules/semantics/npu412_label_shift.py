"""NPU412 label-shift."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (faster)
from npu_lint.rules._handles import call_arg
from npu_lint.rules.base import Example
from npu_lint.rules.semantics._shared import LossRule, PatchedMethod, direct_ce_calls, loss_calls


def _is_shift(node: ast.AST) -> bool:
    """`labels[..., 1:]`, `labels[:, 1:]`, `input_labels[1:]`: a label tensor sliced from position 1."""
    if not isinstance(node, ast.Subscript):
        return False
    base = node.value
    name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else ""
    if "label" not in name:
        return False
    index = node.slice
    last = index.elts[-1] if isinstance(index, ast.Tuple) and index.elts else index
    return (
        isinstance(last, ast.Slice)
        and isinstance(last.lower, ast.Constant)
        and last.lower.value == 1
        and last.upper is None
    )


def _shifted_names(func: ast.AST) -> set[str]:
    out: set[str] = set()
    for node in _walk(func):
        if isinstance(node, ast.Assign) and any(_is_shift(n) for n in _walk(node.value)):
            out.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return out


class LabelShift(LossRule):
    code = "NPU412"
    name = "label-shift"
    summary = "A patched causal-LM loss shifts the labels twice, or not at all."
    why = (
        "Causal-LM losses predict token n+1 from position n. transformers' `loss_function` (`ForCausalLMLoss`) "
        "and VeOmni's loss helpers shift the labels themselves unless `shift_labels=` is given. A patch that "
        "slices `labels[..., 1:]` and then hands the result to such a loss as `labels` shifts twice (every "
        "target is one token late); one that calls `cross_entropy` directly on unshifted labels, where the "
        "upstream forward used `loss_function`, does not shift at all."
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
                    shifted = labels[..., 1:].contiguous()
                    loss = self.loss_function(logits=logits, labels=shifted, vocab_size=self.config.vocab_size, **kwargs)
                return loss, logits
            """,
            path="veomni/models/transformers/llama/llama_gpu_patch_gen_config.py",
            title="shifted by hand, then again by the loss",
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
                    shifted = labels[..., 1:].contiguous()
                    loss = self.loss_function(
                        logits=logits, labels=labels, shift_labels=shifted, vocab_size=self.config.vocab_size, **kwargs
                    )
                return loss, logits
            """,
            path="veomni/models/transformers/llama/llama_gpu_patch_gen_config.py",
        ),
    )
    fix_safety = "No fix: whether to drop the slice or pass it as `shift_labels=` is the author's choice."

    def check(self, patched: PatchedMethod) -> None:
        func = patched.func
        shifted = _shifted_names(func)
        for call in loss_calls(func):
            if any(kw.arg == "shift_labels" for kw in call.keywords):
                continue
            arg = call_arg(call, 1, "labels")
            if arg is None:
                continue
            if (isinstance(arg, ast.Name) and arg.id in shifted) or _is_shift(arg):
                self.report(
                    arg,
                    "labels already shifted by hand are passed as `labels=` to a loss that shifts them again: "
                    "every target is one token late; pass them as `shift_labels=` or pass the raw labels",
                )
        if shifted or any(_is_shift(n) for n in _walk(func)):
            return
        if not loss_calls(patched.upstream) or any("shift" in getattr(n, "id", "") for n in _walk(func)):
            return
        for call in direct_ce_calls(func):
            self.report(
                call,
                f"`{patched.cls}.forward` computes cross-entropy directly on unshifted labels, where the upstream "
                "forward's `loss_function` shifts them: the model learns to copy its input",
            )
