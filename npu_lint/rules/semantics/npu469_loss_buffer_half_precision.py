"""NPU469 loss-buffer-half-precision."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.semantics._shared import first_report
from npu_lint.veomni import losspath

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


class LossBufferHalfPrecision(Rule):
    code = "NPU469"
    name = "loss-buffer-half-precision"
    summary = (
        "A tensor of loss values (a per-token loss buffer, a loss sum, log-probabilities) is created in bf16 or "
        "fp16: bound to a loss name, or filled later in the function with fp32 cross-entropies."
    )
    why = (
        "The loss path computes its values in fp32 (the cross-entropy of upcast logits) and keeps them there: a "
        "per-token loss buffer, a per-source loss sum, the log-probabilities a preference loss subtracts. Stored "
        "in bf16 each value keeps 8 bits of mantissa (a loss of 2.34 becomes 2.34375), and a bf16 running sum "
        "stops growing once it is a few hundred times the terms it adds: the logged or reduced loss drifts from "
        "the one the GPU build reports, more so as the token count grows. The reference is the value the buffer "
        "receives (`F.cross_entropy(logits.float(), ...)`, `torch.as_tensor(x, dtype=torch.float32)`) or the "
        "loss name it is bound to. Logits, activations and weights in bf16 are not reported, nor a loss mask, weight, "
        "scale or coefficient, a buffer upcast before its first fill, or a fill cast back down or of softmax "
        "probabilities."
    )
    bad = (
        Example(
            """
            import torch
            import torch.nn.functional as F


            def per_token_loss(logits, labels, ignore_index, chunk):
                result = torch.empty(logits.size(0), device=logits.device, dtype=torch.bfloat16)
                for start in range(0, logits.size(0), chunk):
                    end = start + chunk
                    result[start:end] = F.cross_entropy(
                        logits[start:end].float(), labels[start:end], ignore_index=ignore_index, reduction="none"
                    )
                return result
            """,
            path="veomni/trainer/callbacks/toy_channel_loss.py",
        ),
    )
    good = (
        Example(
            """
            import torch
            import torch.nn.functional as F


            def per_token_loss(logits, labels, ignore_index, chunk):
                result = torch.empty(logits.size(0), device=logits.device, dtype=torch.float32)
                for start in range(0, logits.size(0), chunk):
                    end = start + chunk
                    result[start:end] = F.cross_entropy(
                        logits[start:end].float(), labels[start:end], ignore_index=ignore_index, reduction="none"
                    )
                return result
            """,
            path="veomni/trainer/callbacks/toy_channel_loss.py",
        ),
        Example(
            """
            import torch


            def prepare(hidden_states, logits):
                hidden_states = hidden_states.to(dtype=torch.bfloat16)
                logits_bf16 = logits.to(torch.bfloat16)
                return hidden_states, logits_bf16
            """,
            path="veomni/trainer/callbacks/toy_channel_loss.py",
            title="activations and logits in bf16",
        ),
    )
    fix_safety = "No fix: create the buffer in `torch.float32`."
    requires = (("bfloat16", "float16", "half"),)
    node_types = _FUNCS

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        for call, name, why in losspath.half_loss_buffers(node):
            if first_report(self, call):
                self.report(
                    call,
                    f"`{name}` is created in half precision, yet {why}: keep loss values in `torch.float32`",
                )
