"""NPU438 preference-temperature."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.semantics._shared import first_report
from npu_lint.veomni import losspath

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


class PreferenceTemperature(Rule):
    code = "NPU438"
    name = "preference-temperature"
    summary = (
        "A preference loss with a temperature (`beta`) reads its margin without it in one term, leaves one implicit "
        "reward unscaled, gives both label-smoothed logistic terms the same sign, or regresses an IPO margin to a "
        "target that multiplies by the temperature instead of dividing by it (`1 / 2 * beta`)."
    )
    why = (
        "In DPO the temperature `beta` scales every use of the margin: `-logsigmoid(beta * m) * (1 - eps) - "
        "logsigmoid(-beta * m) * eps`, IPO's `(m - 1 / (2 * beta)) ** 2`, the rewards `beta * (policy - "
        "reference)`. A term that reads the margin without `beta` is computed at `beta = 1` whatever is configured "
        "(the reported rewards, still scaled, hide it); a reward scaled on one side only makes the reward margin "
        "compare different scales; two smoothed terms with the same sign turn conservative DPO into a rescaled "
        "plain loss. The check runs on functions with a `beta` parameter: the margin is a local built from a "
        "difference of preference quantities (names with `chosen`/`rejected`, `policy`/`reference` and "
        "`logps`/`logratios`); a term is scaled when it reads `beta` or a local built from it."
    )
    bad = (
        Example(
            """
            import torch.nn.functional as F


            def preference_loss(pi_logratios, ref_logratios, beta, label_smoothing=0.0):
                logits = pi_logratios - ref_logratios
                return -F.logsigmoid(logits) * (1 - label_smoothing) - F.logsigmoid(-beta * logits) * label_smoothing
            """,
            path="veomni/trainer/toy_preference_trainer.py",
            title="the main term computed at beta = 1",
        ),
    )
    good = (
        Example(
            """
            import torch.nn.functional as F


            def preference_loss(pi_logratios, ref_logratios, beta, label_smoothing=0.0):
                logits = pi_logratios - ref_logratios
                scaled = beta * logits
                return -F.logsigmoid(scaled) * (1 - label_smoothing) - F.logsigmoid(-scaled) * label_smoothing
            """,
            path="veomni/trainer/toy_preference_trainer.py",
            title="both terms scaled, opposite signs",
        ),
    )
    fix_safety = "No fix: multiply the margin by the temperature where the objective defines it."
    requires = ("beta", ("sigmoid", "reward", "**"))
    node_types = _FUNCS

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        if losspath.temperature_of(node) is None:
            return
        for where, what in losspath.unscaled_margins(node):
            if not first_report(self, where):
                continue
            self.report(
                where,
                f"{what}: the preference loss is then computed at temperature 1 there, whatever "
                "`beta` is configured (scale every use of the margin, and every reward, by `beta`)",
            )
        for where, what in losspath.squared_target_faults(node):
            if not first_report(self, where):
                continue
            self.report(
                where,
                f"{what}: IPO regresses the margin to `1 / (2 * beta)`, which shrinks as the temperature grows; "
                "keep the temperature in the divisor (`1 / (2 * beta)`)",
            )
        for where, what in losspath.smoothing_faults(node):
            if not first_report(self, where):
                continue
            self.report(
                where,
                f"{what}: a label-smoothed logistic loss pairs `logsigmoid(beta * m) * (1 - eps)` with "
                "`logsigmoid(-beta * m) * eps`; with one sign the smoothing only rescales the loss",
            )
