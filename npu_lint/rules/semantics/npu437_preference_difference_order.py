"""NPU437 preference-difference-order."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import call_name, nodes_of
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.veomni import losspath

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _params(func: ast.AST, bound: bool) -> list[str]:
    """The positional parameters a call binds (without `self` / `cls` for a method called through an attribute)."""
    args = [a.arg for a in (*func.args.posonlyargs, *func.args.args)]  # type: ignore[attr-defined]
    static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in func.decorator_list)  # type: ignore[attr-defined]
    if bound and not static and args and args[0] in ("self", "cls"):
        return args[1:]
    return args


class PreferenceDifferenceOrder(Rule):
    code = "NPU437"
    name = "preference-difference-order"
    summary = (
        "A preference objective (DPO, IPO, their rewards) subtracts its log-probabilities the wrong way round "
        "(rejected minus chosen, reference minus policy), or binds them to the wrong parameters."
    )
    why = (
        "DPO's margin is `(policy_chosen - policy_rejected) - (reference_chosen - reference_rejected)` and its "
        "implicit rewards are `beta * (policy - reference)`: every difference runs chosen minus rejected and policy "
        "minus reference. One reversed difference -- or one pair of arguments handed over in the other order -- "
        "flips the sign of a term: the loss then prefers the rejected answer, or anchors to the reference the wrong "
        "way, and nothing fails; the reward accuracy drifts instead. The check reads each quantity's role from its "
        "name (`policy`/`pi`/`ref`/`reference` and `chosen`/`rejected` with `logps`, `logratios`, `rewards`) and "
        "looks at every subtraction of two such quantities (a difference written under a unary minus, "
        "`-(b - a)`, is left alone) and at the positional and keyword arguments of calls to functions of the "
        "same file whose parameters carry roles."
    )
    bad = (
        Example(
            """
            import torch.nn.functional as F


            def preference_loss(pi_chosen_logps, pi_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta):
                pi_logratios = pi_chosen_logps - pi_rejected_logps
                ref_logratios = ref_rejected_logps - ref_chosen_logps
                return -F.logsigmoid(beta * (pi_logratios - ref_logratios))
            """,
            path="veomni/trainer/toy_preference_trainer.py",
            title="the reference log-ratio runs rejected minus chosen",
        ),
        Example(
            """
            def score(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps):
                return (policy_chosen_logps - policy_rejected_logps) - (reference_chosen_logps - reference_rejected_logps)


            def step(pc, pr, ref_chosen_logps, ref_rejected_logps):
                return score(pc, pr, ref_rejected_logps, ref_chosen_logps)
            """,
            path="veomni/trainer/toy_preference_trainer.py",
            title="the reference log-probs handed over in rejected/chosen order",
        ),
    )
    good = (
        Example(
            """
            import torch.nn.functional as F


            def preference_loss(pi_chosen_logps, pi_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta):
                pi_logratios = -(pi_rejected_logps - pi_chosen_logps)
                ref_logratios = ref_chosen_logps - ref_rejected_logps
                return -F.logsigmoid(beta * (pi_logratios - ref_logratios))
            """,
            path="veomni/trainer/toy_preference_trainer.py",
            title="chosen minus rejected (a negated reversed difference is the same)",
        ),
    )
    fix_safety = "No fix: which operand is wrong is the author's call."
    requires = (("chosen", "rejected", "ref_", "reference", "policy"),)
    node_types = (ast.Module,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.Module)
        functions: dict[str, ast.AST] = {}
        for stmt in node.body:
            if isinstance(stmt, _FUNCS):
                functions.setdefault(stmt.name, stmt)
            elif isinstance(stmt, ast.ClassDef):
                for item in stmt.body:
                    if isinstance(item, _FUNCS):
                        functions.setdefault(item.name, item)
        for sub, want in losspath.signed_difference_faults(node):
            self.report(
                sub,
                f"`{ast.unparse(sub)}` subtracts the wrong way round: a preference objective takes "
                f"{want} (DPO: `(policy_chosen - policy_rejected) - (reference_chosen - "
                "reference_rejected)`, rewards `beta * (policy - reference)`)",
            )
        functions = {  # only functions whose parameters carry preference roles can be bound wrongly
            name: f
            for name, f in functions.items()
            if sum(1 for a in f.args.args if (r := losspath.preference_role(a.arg)) is not None and r.full)
            >= 2  # type: ignore[attr-defined]
        }
        if not functions:
            return
        for n in nodes_of(node, ast.Call):
            assert isinstance(n, ast.Call)
            f = n.func
            callee = call_name(n)
            target = functions.get(callee) if callee else None
            if target is None:
                continue
            params = _params(target, isinstance(f, ast.Attribute))
            for arg, text, param in losspath.role_binding_faults(n, params):
                self.report(
                    arg,
                    f"`{text}` is handed to `{callee}` as `{param}`: the preference roles (policy/reference, "
                    "chosen/rejected) of the argument and the parameter differ, so a difference of the "
                    "objective changes sign",
                )
