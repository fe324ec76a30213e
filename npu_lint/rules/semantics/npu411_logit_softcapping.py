"""NPU411 logit-softcapping."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (faster)
from npu_lint.rules.base import Example
from npu_lint.rules.semantics._shared import LossRule, PatchedMethod, def_span, mentions_attr


def _tanh_runs(func: ast.AST) -> list[ast.stmt]:
    """Second tanh soft-capping statements of one straight-line statement list (the cap applied twice)."""
    out = []
    for node in _walk(func):
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if not isinstance(stmts, list):
                continue
            seen = 0
            for stmt in stmts:
                if (
                    isinstance(stmt, ast.Assign)
                    and isinstance(stmt.value, ast.Call)
                    and isinstance(stmt.value.func, ast.Attribute)
                    and stmt.value.func.attr == "tanh"
                ):
                    seen += 1
                    if seen == 2:
                        out.append(stmt)
    return out


class LogitSoftcapping(LossRule):
    code = "NPU411"
    name = "logit-softcapping"
    summary = "A patched causal-LM forward drops (or repeats) the upstream final-logit soft-capping."
    why = (
        "Gemma-family models cap their logits (`logits = tanh(logits / cap) * cap`, with "
        "`config.final_logit_softcapping`) before the loss. A patched `ForCausalLM.forward` that computes the "
        "loss itself (a fused linear cross-entropy, a loss handle) and no longer mentions the cap trains on "
        "uncapped logits; one that caps twice squashes them. The upstream forward is read from the installed "
        "transformers source; only models whose upstream forward caps are checked."
    )
    bad = (
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.gemma3.modeling_gemma3", target_file="x.py")


            @config.override_method("Gemma3ForCausalLM.forward")
            def gemma3_forcausallm_forward_patched(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
                outputs = self.model(input_ids=input_ids, **kwargs)
                hidden_states = outputs.last_hidden_state
                slice_indices = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
                logits = self.lm_head(hidden_states[:, slice_indices, :])
                loss = None
                if labels is not None:
                    loss = self.loss_function(logits, labels, self.vocab_size, **kwargs)
                return loss, logits
            """,
            path="veomni/models/transformers/gemma3/gemma3_gpu_patch_gen_config.py",
            title="the cap dropped",
        ),
    )
    good = (
        Example(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.gemma3.modeling_gemma3", target_file="x.py")


            @config.override_method("Gemma3ForCausalLM.forward")
            def gemma3_forcausallm_forward_patched(self, input_ids=None, labels=None, logits_to_keep=0, **kwargs):
                outputs = self.model(input_ids=input_ids, **kwargs)
                hidden_states = outputs.last_hidden_state
                slice_indices = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
                logits = self.lm_head(hidden_states[:, slice_indices, :])
                if self.config.final_logit_softcapping is not None:
                    logits = logits / self.config.final_logit_softcapping
                    logits = torch.tanh(logits)
                    logits = logits * self.config.final_logit_softcapping
                loss = None
                if labels is not None:
                    loss = self.loss_function(logits, labels, self.vocab_size, **kwargs)
                return loss, logits
            """,
            path="veomni/models/transformers/gemma3/gemma3_gpu_patch_gen_config.py",
        ),
    )
    fix_safety = "No fix: where the cap belongs depends on the loss path the patch chose."

    def check(self, patched: PatchedMethod) -> None:
        if not mentions_attr(patched.upstream, "final_logit_softcapping"):
            return
        func = patched.func
        if not mentions_attr(func, "final_logit_softcapping"):
            if mentions_attr(func, "lm_head") or mentions_attr(func, "loss_function"):
                self.report(
                    def_span(self.ctx, func),
                    f"`{patched.cls}.forward` replaces the upstream loss path but drops the final-logit "
                    "soft-capping (`config.final_logit_softcapping`) the upstream forward applies",
                )
            return
        for stmt in _tanh_runs(func):
            self.report(stmt, "the final-logit soft-capping is applied a second time in the same path")
