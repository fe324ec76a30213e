"""NPU463 sibling-loss-call-diverges."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni import losspath


class SiblingLossCallDiverges(Rule):
    code = "NPU463"
    name = "sibling-loss-call-diverges"
    summary = (
        "A call of a loss kernel hands it less, or something else, than another call of the same kernel in the "
        "module: a value the caller holds is left out (`temperature`), or one local fills two of its parameters "
        "(`shift_labels=labels`)."
    )
    why = (
        "A loss module often reaches one kernel from several places: the causal-LM loss wrapper and the "
        "chunk-loss dispatch an NPU host installs, a distillation branch and a plain log-prob branch. Each "
        "call is bound by the same contract, so a call that forwards `temperature=temperature` is the reference "
        "for the call on the other path: when that one pops `temperature` from its kwargs and never hands it "
        "on, log-probs and entropy on that path are computed at temperature 1; when it passes the unshifted "
        "`labels` as `shift_labels` too, every position is scored against its own token. Only one backend runs "
        "each path, so the results differ by device and no test that runs one path sees it."
    )
    bad = (
        Example(
            """
            def causal_lm_loss(hidden_states, weights, labels, shift_labels=None, **kwargs):
                temperature = kwargs.pop("temperature", 1.0)
                return chunk_logprobs_function(
                    hidden_states, weights, labels, shift_labels=shift_labels, temperature=temperature
                )


            def chunk_loss_dispatch(hidden_states, weights, labels, **kwargs):
                temperature = kwargs.pop("temperature", 1.0)
                return chunk_logprobs_function(hidden_states, weights, labels, shift_labels=kwargs.get("shift_labels"))
            """,
            path="veomni/ops/kernels/toy_ce/dispatch.py",
            title="the popped temperature never reaches the kernel on the dispatch path",
        ),
    )
    good = (
        Example(
            """
            def causal_lm_loss(hidden_states, weights, labels, shift_labels=None, **kwargs):
                temperature = kwargs.pop("temperature", 1.0)
                return chunk_logprobs_function(
                    hidden_states, weights, labels, shift_labels=shift_labels, temperature=temperature
                )


            def chunk_loss_dispatch(hidden_states, weights, labels, **kwargs):
                temperature = kwargs.pop("temperature", 1.0)
                return chunk_logprobs_function(
                    hidden_states, weights, labels, shift_labels=kwargs.get("shift_labels"), temperature=temperature
                )
            """,
            path="veomni/ops/kernels/toy_ce/dispatch.py",
        ),
    )
    fix_safety = "No fix: hand the value on as the sibling call does, or drop it from the caller on purpose."
    requires = (("loss", "logprob", "log_prob", "entropy", "distill", "kl_div"),)
    node_types = (ast.Module,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Module)
        for site, call, detail in losspath.sibling_call_faults(node):
            self.report(
                site,
                f"`{ast.unparse(call.func)}(...)` is called otherwise than its sibling call: {detail}",
            )
