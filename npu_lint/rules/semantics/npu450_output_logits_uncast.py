"""NPU450 output-logits-uncast."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni import losspath

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


class OutputLogitsUncast(Rule):
    code = "NPU450"
    name = "output-logits-uncast"
    summary = (
        "A post-forward computes the step's cross-entropy over the model output's logits without casting them to "
        "float32."
    )
    why = (
        "The logits a bf16 model returns are bf16: a log-softmax over a vocabulary of 100k+ entries in bf16 loses "
        "the small probabilities, and the loss and its gradient differ from the fp32 reference (transformers' "
        "`ForCausalLMLoss` upcasts with `logits.float()` first). A trainer that gathers `outputs.logits` and takes "
        "its own cross-entropy must upcast the same way; on NPU the bf16 softmax drifts further from the GPU run. "
        "The check follows the first argument of the cross-entropy handed on as `outputs.loss` back to an "
        "`.logits` read and looks for a `.float()` / `.to(torch.float32)` on the way."
    )
    bad = (
        Example(
            """
            import torch
            import torch.nn as nn


            def postforward(outputs, labels):
                logits = torch.cat(outputs.logits, dim=0)
                loss = nn.functional.cross_entropy(logits, labels.view(-1), ignore_index=-100)
                outputs.loss = loss
                return outputs
            """,
            path="veomni/trainer/toy_trainer.py",
            title="bf16 logits into the loss",
        ),
    )
    good = (
        Example(
            """
            import torch
            import torch.nn as nn


            def postforward(outputs, labels):
                logits = torch.cat(outputs.logits, dim=0).float()
                loss = nn.functional.cross_entropy(logits, labels.view(-1), ignore_index=-100)
                outputs.loss = loss
                return outputs
            """,
            path="veomni/trainer/toy_trainer.py",
            title="upcast first",
        ),
    )
    fix_safety = "No fix."
    requires = ("cross_entropy", ".logits", ".loss")
    node_types = _FUNCS

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test and not ctx.source.kind.generated

    def visit(self, node: ast.AST) -> None:
        seen = self.ctx.memo.setdefault((self.code, "reported"), set())
        assert isinstance(seen, set)
        for arg, name in losspath.uncast_output_logits(node):
            if id(arg) in seen:
                continue
            seen.add(id(arg))
            self.report(
                arg,
                f"`{name}` comes from the model output's logits and reaches the cross-entropy without a cast to "
                "float32: the softmax over the vocabulary runs in the model's dtype (add `.float()` first)",
            )
