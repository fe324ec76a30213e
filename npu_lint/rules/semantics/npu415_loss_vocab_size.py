"""NPU415 loss-vocab-size."""

from __future__ import annotations

import ast

from npu_lint.core.diagnostics import Applicability
from npu_lint.rules._handles import call_arg
from npu_lint.rules.base import Example, make_fix
from npu_lint.rules.semantics._shared import LossRule, PatchedMethod, loss_calls


def _vocab_arg(call: ast.Call) -> ast.expr | None:
    return call_arg(call, 2, "vocab_size")


class LossVocabSize(LossRule):
    code = "NPU415"
    name = "loss-vocab-size"
    summary = "A patched vision-language loss reads the vocabulary size from the wrong config."
    why = (
        "A vision-language model's config nests the language model's: the vocabulary size is "
        "`config.text_config.vocab_size`, and the top-level config has no `vocab_size` (an AttributeError) or a "
        "stale one. The loss reshapes logits to `[-1, vocab_size]`: a wrong size mixes tokens across rows or "
        "fails. The expression is compared with the one the upstream forward passes to its loss."
    )
    bad = (
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


            @config.override_method("Qwen3VLForConditionalGeneration.forward")
            def qwen3_vl_forward_patched(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
                hidden_states = self.model(input_ids=input_ids, **kwargs)[0]
                slice_indices = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
                logits = self.lm_head(hidden_states[:, slice_indices, :])
                loss = None
                if labels is not None:
                    loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size)
                return loss, logits
            """,
            fixed="""
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


            @config.override_method("Qwen3VLForConditionalGeneration.forward")
            def qwen3_vl_forward_patched(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
                hidden_states = self.model(input_ids=input_ids, **kwargs)[0]
                slice_indices = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
                logits = self.lm_head(hidden_states[:, slice_indices, :])
                loss = None
                if labels is not None:
                    loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.text_config.vocab_size)
                return loss, logits
            """,
            path="veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
        ),
    )
    good = (
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


            @config.override_method("Qwen3VLForConditionalGeneration.forward")
            def qwen3_vl_forward_patched(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
                hidden_states = self.model(input_ids=input_ids, **kwargs)[0]
                slice_indices = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
                logits = self.lm_head(hidden_states[:, slice_indices, :])
                loss = None
                if labels is not None:
                    loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.text_config.vocab_size)
                return loss, logits
            """,
            path="veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
        ),
    )
    fix_safety = "Safe: the argument becomes the expression the upstream forward passes (`self.config.text_config.vocab_size`)."

    def check(self, patched: PatchedMethod) -> None:
        expected = None
        for call in loss_calls(patched.upstream):
            arg = _vocab_arg(call)
            if arg is not None and "text_config" in ast.unparse(arg):
                expected = ast.unparse(arg)
                break
        if expected is None:
            return
        for call in loss_calls(patched.func):
            arg = _vocab_arg(call)
            if arg is None or "text_config" in ast.unparse(arg):
                continue
            if isinstance(arg, ast.Name):
                continue  # a local computed earlier: not judged
            fix = make_fix(f"Pass `{expected}`", [self.ctx.replace(arg, expected)], Applicability.SAFE)
            self.report(
                arg,
                f"`{ast.unparse(arg)}` is not the language model's vocabulary size; the upstream forward passes "
                f"`{expected}`",
                fix,
            )
