"""NPU464 kl-direction-reversed."""

from __future__ import annotations

import ast

from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.semantics._shared import first_report
from npu_lint.veomni import losspath

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


class KlDirectionReversed(Rule):
    code = "NPU464"
    name = "kl-direction-reversed"
    summary = (
        "A KL term is weighted by `exp(a)` but subtracts `a` (`p.exp() * (log_q - p)`): it computes the "
        "negated divergence."
    )
    why = (
        "A divergence `KL(p || q) = sum p * (log p - log q)` weights each token by the distribution whose "
        "log-probability comes first in the difference; distillation kernels write it as "
        "`teacher_lp.exp() * (teacher_lp - student_lp)`. With the difference the other way round the term is "
        "`-KL`: the reported distillation loss is never positive, and a loss that minimises it pushes the "
        "student away from the teacher (or disagrees with the gradient a hand-written backward applies). The "
        "definition itself is the reference: the weight's own log-probability must be the minuend. A term "
        "negated within its statement (`-(p * (log_q - log_p))`) is the divergence again and is not reported."
    )
    bad = (
        Example(
            """
            def topk_forward_kl(teacher_lp, student_lp):
                teacher_lp = teacher_lp.float()
                return (teacher_lp.exp() * (student_lp.float() - teacher_lp)).sum(dim=-1)
            """,
            path="veomni/ops/kernels/toy_ce/chunk_distill.py",
        ),
    )
    good = (
        Example(
            """
            def topk_forward_kl(teacher_lp, student_lp):
                teacher_lp = teacher_lp.float()
                return (teacher_lp.exp() * (teacher_lp - student_lp.float())).sum(dim=-1)
            """,
            path="veomni/ops/kernels/toy_ce/chunk_distill.py",
        ),
    )
    fix_safety = "No fix: swap the difference's operands (or negate it) where the divergence is meant."
    requires = ("exp",)
    node_types = _FUNCS

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        for site, detail in losspath.kl_direction_faults(node):
            if first_report(self, site):
                self.report(
                    site, f"a KL term with its difference reversed: {detail} (the negated divergence)"
                )
