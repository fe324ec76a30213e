"""The loss-path arithmetic model: what a loss value is made of, read statically from one function.

Three contracts a training loss must keep, whatever file it is written in:

* **Preference objectives** (DPO / IPO and their implicit rewards). Every log-probability quantity has a *model*
  (the trained policy or the frozen reference) and a *side* (the chosen or the rejected answer). The objective is
  built from signed differences that always run the same way: chosen minus rejected, policy minus reference
  (``(pi_c - pi_r) - (ref_c - ref_r)``; rewards ``beta * (pi - ref)``). A temperature parameter (``beta``) scales
  every margin the loss reads; a label-smoothed logistic loss pairs ``logsigmoid(m)`` with ``logsigmoid(-m)``.
  `preference_role`, `signed_difference_faults`, `unscaled_margins`, `smoothing_faults` and
  `role_binding_faults` read these from a function.
* **Role-masked labels** (chat templates). A message's tokens are training targets only for the assistant role
  unless the data says otherwise: a default supervision flag is 0 for a user/system/tool turn and 1 for an
  assistant turn, and the unsupervised branch of a label builder appends ``IGNORE_INDEX``, never token ids.
  `supervision_default_faults` and `unmasked_branch_faults` read these.
* **Per-token means** (trainer post-forward): a loss handed on as ``outputs.loss`` is the per-token mean over the
  valid tokens; the step's weighting multiplies it by the token count again. `unnormalised_losses` reads a
  cross-entropy taken with ``reduction="sum"`` / ``"none"`` and handed on without a division by a count.

Everything here is stdlib ``ast`` on one function; the rules in ``rules/semantics`` ask it.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from npu_lint.core.astutil import call_name, copy_tree, int_value, last_name, nodes_of, str_value, walk
from npu_lint.core.astutil import walk as _walk  # ast.walk's order, as a list (faster)
from npu_lint.core.memo import Bounded
from npu_lint.veomni.backward import kept_for_backward
from npu_lint.veomni.upstream import device_move, same_node

if TYPE_CHECKING:
    from npu_lint.veomni.copyequiv import Keys

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)

# ---------------------------------------------------------------------------------------------------------------
# Preference objectives

_POLICY = re.compile(r"(?:^|_)(?:policy|pi|actor|model|cur|current)(?:_|$)")
_REFERENCE = re.compile(r"(?:^|_)(?:ref|reference|refer|old|base)(?:_|$)")
_CHOSEN = re.compile(r"(?:^|_)(?:chosen|win|winner|preferred)(?:_|$)")
_REJECTED = re.compile(r"(?:^|_)(?:rejected|lose|loser|dispreferred)(?:_|$)")
# A quantity of a preference objective: a log-probability, a log-ratio, a reward.
_VALUE = re.compile(r"log_?p|logprob|log_prob|logratio|log_ratio|reward|logit")
_RATIO = re.compile(r"logratio|log_ratio")
TEMPERATURES = frozenset({"beta"})
_LOGISTIC = frozenset({"logsigmoid", "log_sigmoid", "sigmoid"})


@dataclass(frozen=True)
class Role:
    model: str | None  # "policy" / "reference" / None
    side: str | None  # "chosen" / "rejected" / None
    ratio: bool  # a chosen-minus-rejected log-ratio

    @property
    def full(self) -> bool:
        return self.model is not None and self.side is not None


def _leaf_name(node: ast.AST) -> str | None:
    """`x`, `self.x`, `out.x`, `x.detach()`, `x[0]`, `x.float()` -> "x"."""
    while True:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not node.args:
            node = node.func.value
        elif isinstance(node, ast.Subscript):
            node = node.value
        else:
            break
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def preference_role(name: str) -> Role | None:
    """The role a name gives a preference quantity, or None when it names none."""
    low = name.lower()
    if not _VALUE.search(low):
        return None
    model = "reference" if _REFERENCE.search(low) else "policy" if _POLICY.search(low) else None
    chosen, rejected = bool(_CHOSEN.search(low)), bool(_REJECTED.search(low))
    side = "chosen" if chosen and not rejected else "rejected" if rejected and not chosen else None
    ratio = bool(_RATIO.search(low)) and side is None
    if model is None and side is None:
        return None
    if model is None and low.startswith("pi_"):
        model = "policy"
    return Role(model, side, ratio)


def _role_of(node: ast.AST) -> Role | None:
    name = _leaf_name(node)
    return preference_role(name) if name else None


def _negated_parents(func: ast.AST) -> set[int]:
    """Ids of the subtractions written under a unary minus (`-(b - a)` is `a - b` on purpose)."""
    out: set[int] = set()
    for n in nodes_of(func, ast.UnaryOp):
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            inner = n.operand
            if isinstance(inner, ast.BinOp) and isinstance(inner.op, ast.Sub):
                out.add(id(inner))
    return out


def signed_difference_faults(func: ast.AST) -> Iterator[tuple[ast.BinOp, str]]:
    """Subtractions of two preference quantities written the wrong way round, with what the right way is."""
    negated = _negated_parents(func)
    for n in nodes_of(func, ast.BinOp):
        if not (isinstance(n, ast.BinOp) and isinstance(n.op, ast.Sub)) or id(n) in negated:
            continue
        left, right = _role_of(n.left), _role_of(n.right)
        if left is None or right is None:
            continue
        lm, rm = left.model, right.model
        if {lm, rm} == {
            None,
            "reference",
        }:  # `chosen_logps - ref_chosen_logps`: the unqualified one is the policy
            lm, rm = lm or "policy", rm or "policy"
        if lm == rm and {left.side, right.side} == {"chosen", "rejected"}:
            if left.side == "rejected":
                yield n, "chosen minus rejected"
        elif (
            left.side == right.side
            and (left.side is not None or (left.ratio and right.ratio))
            and {lm, rm}
            == {
                "policy",
                "reference",
            }
        ):
            if lm == "reference":
                yield n, "policy minus reference"


def _reads(node: ast.AST) -> set[str]:
    return {x.id for x in _walk(node) if isinstance(x, ast.Name)}


def _assignments(func: ast.AST) -> list[tuple[str, ast.AST]]:
    out: list[tuple[str, ast.AST]] = []
    for n in nodes_of(func, ast.Assign, ast.AugAssign):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            out.append((n.targets[0].id, n.value))
        elif isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name):
            out.append((n.target.id, n.value))
    return out


def _tainted(func: ast.AST, seeds: set[str]) -> set[str]:
    """The locals whose value reads one of ``seeds`` (transitively, in any order of assignment)."""
    out = set(seeds)
    pairs = [(name, _reads(value)) for name, value in _assignments(func)]
    changed = True
    while changed:
        changed = False
        for name, reads in pairs:
            if name not in out and reads & out:
                out.add(name)
                changed = True
    return out


def temperature_of(func: ast.AST) -> str | None:
    """The temperature parameter of a preference loss function (`beta`), else None."""
    if not isinstance(func, _FUNCS):
        return None
    args = func.args
    for a in (*args.posonlyargs, *args.args, *args.kwonlyargs):
        if a.arg in TEMPERATURES:
            return a.arg
    return None


def _margins(func: ast.AST) -> set[str]:
    """Locals built from a difference of preference quantities (the margin `logits = pi_lr - ref_lr`)."""
    seeds: set[str] = set()
    for name, value in _assignments(func):
        if preference_role(name) is not None and preference_role(name).ratio:  # type: ignore[union-attr]
            seeds.add(name)
            continue
        for n in _walk(value):
            if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Sub):
                if _role_of(n.left) is not None and _role_of(n.right) is not None:
                    seeds.add(name)
                    break
    # the margin itself, not the rewards: names that carry a role are quantities of their own
    return {name for name in _tainted(func, seeds) if preference_role(name) is None or name in seeds}


def _is_logistic(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    name = call_name(node)
    return name in _LOGISTIC


def unscaled_margins(func: ast.AST) -> Iterator[tuple[ast.AST, str]]:
    """Where a preference loss with a temperature reads its margin without it: a logistic term, a squared term,
    an implicit reward. Yields (node, what)."""
    beta = temperature_of(func)
    if beta is None:
        return
    margins = _margins(func)
    scaled = _tainted(func, {beta})
    if not margins:
        return
    for n in nodes_of(func, ast.Call):
        if _is_logistic(n) and n.args:  # type: ignore[attr-defined]
            arg = n.args[0]  # type: ignore[attr-defined]
            reads = _reads(arg)
            if reads & margins and not reads & scaled:
                yield n, f"`{ast.unparse(n)}` reads the margin without the temperature `{beta}`"
    loss_names = {name for name, _ in _assignments(func) if "loss" in name.lower()}
    for name, value in _assignments(func):
        if name not in loss_names or any(_is_logistic(x) for x in _walk(value)):
            continue
        for sq in _walk(value):
            if isinstance(sq, ast.BinOp) and isinstance(sq.op, ast.Pow):
                reads = _reads(sq.left)
                if reads & margins and not reads & scaled:
                    yield sq, f"the squared term `{ast.unparse(sq)}` has no temperature `{beta}` in it"
    rewards = [(name, value) for name, value in _assignments(func) if "reward" in name.lower()]
    if any(_reads(v) & scaled for _, v in rewards):
        for name, value in rewards:
            roles = [x for x in _walk(value) if isinstance(x, ast.Name) and preference_role(x.id) is not None]
            if roles and not _reads(value) & scaled:
                yield value, f"`{name}` is not scaled by `{beta}`, while the other rewards are"


def _logistic_sign(arg: ast.AST) -> tuple[bool, frozenset[str]]:
    """(negated, names) of a logistic term's argument: `-beta * m` -> (True, {beta, m})."""
    minus = sum(1 for n in _walk(arg) if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub))
    return minus % 2 == 1, frozenset(_reads(arg))


def smoothing_faults(func: ast.AST) -> Iterator[tuple[ast.AST, str]]:
    """A label-smoothed logistic loss whose two terms read the same margin with the same sign."""
    if temperature_of(func) is None:
        return
    margins = _margins(func)
    for name, value in _assignments(func):
        if "loss" not in name.lower():
            continue
        terms = [n for n in _walk(value) if _is_logistic(n) and n.args]  # type: ignore[attr-defined]
        if len(terms) != 2 or not any("smooth" in r for r in _reads(value)):
            continue
        signs = [_logistic_sign(t.args[0]) for t in terms]  # type: ignore[attr-defined]
        if signs[0][1] == signs[1][1] and signs[0][1] & margins and signs[0][0] == signs[1][0]:
            yield terms[1], "both logistic terms read the margin with the same sign"


def role_binding_faults(call: ast.Call, params: list[str]) -> Iterator[tuple[ast.AST, str, str]]:
    """Positional arguments whose preference role differs from the parameter they bind. Yields
    (argument, argument name, parameter name)."""
    for arg, param in zip(call.args, params):
        a, p = _role_of(arg), preference_role(param)
        if a is None or p is None or not (a.full and p.full):
            continue
        if (a.model, a.side) != (p.model, p.side):
            yield arg, ast.unparse(arg), param
    for kw in call.keywords:
        if kw.arg is None:
            continue
        a, p = _role_of(kw.value), preference_role(kw.arg)
        if a is not None and p is not None and a.full and p.full and (a.model, a.side) != (p.model, p.side):
            yield kw.value, ast.unparse(kw.value), kw.arg


# ---------------------------------------------------------------------------------------------------------------
# Role-masked labels

_ROLES = ("assistant", "user", "system", "tool")
_FLAG = re.compile(r"loss_mask|supervis|train_on|is_target")


def _eval_role(node: ast.AST, role: str, role_reads: set[str]) -> object:
    """Evaluate a supervision expression for one role, or raise ValueError when it cannot be read."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.IfExp):
        return _eval_role(
            node.body if _eval_role(node.test, role, role_reads) else node.orelse, role, role_reads
        )
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("int", "bool"):
        if len(node.args) == 1:
            v = _eval_role(node.args[0], role, role_reads)
            return int(v) if node.func.id == "int" else bool(v)  # type: ignore[call-overload]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return not _eval_role(node.operand, role, role_reads)
    if isinstance(node, ast.BoolOp):
        vals = [_eval_role(v, role, role_reads) for v in node.values]
        return all(vals) if isinstance(node.op, ast.And) else any(vals)
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        left, right = node.left, node.comparators[0]
        if _is_role(right, role_reads) and not _is_role(left, role_reads):
            left, right = right, left
        if _is_role(left, role_reads):
            op = node.ops[0]
            if isinstance(op, (ast.Eq, ast.NotEq)) and isinstance(right, ast.Constant):
                eq = role == right.value
                return eq if isinstance(op, ast.Eq) else not eq
            if isinstance(op, (ast.In, ast.NotIn)):
                if isinstance(right, (ast.Tuple, ast.List, ast.Set)) and all(
                    isinstance(e, ast.Constant) for e in right.elts
                ):
                    inside = role in [e.value for e in right.elts]  # type: ignore[attr-defined]
                elif isinstance(right, ast.Constant) and isinstance(right.value, str):
                    inside = role in right.value
                else:
                    raise ValueError
                return inside if isinstance(op, ast.In) else not inside
        if (
            isinstance(node.ops[0], (ast.In, ast.NotIn))
            and isinstance(left, ast.Constant)
            and _is_role(right, role_reads)
        ):
            inside = left.value in role
            return inside if isinstance(node.ops[0], ast.In) else not inside
    raise ValueError


def _is_role(node: ast.AST, role_reads: set[str]) -> bool:
    """`role`, `message["role"]`, `msg.get("role")`, `message.role`."""
    if isinstance(node, ast.Name):
        return node.id in role_reads
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return node.slice.value == "role"
    if isinstance(node, ast.Attribute):
        return node.attr == "role"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value == "role"
    return False


def _role_locals(func: ast.AST) -> set[str]:
    out = {"role"}
    for name, value in _assignments(func):
        if _is_role(value, set()):
            out.add(name)
    return out


def _reads_role(node: ast.AST, role_reads: set[str]) -> bool:
    return any(_is_role(n, role_reads) for n in _walk(node))


def _role_default_fault(expr: ast.AST, role_reads: set[str]) -> str | None:
    """Why a default supervision flag supervises a prompt turn, or None when it is right or unreadable."""
    try:
        values = {role: _eval_role(expr, role, role_reads) for role in _ROLES}
    except (ValueError, TypeError, OverflowError):  # `int(1e999)`: unreadable, as any other
        return None
    if not values["assistant"]:
        return None  # masks the assistant too: another contract (pretraining templates label nothing here)
    wrong = [role for role in ("user", "system", "tool") if values[role]]
    if wrong:
        return f"it is {values[wrong[0]]!r} for a `{wrong[0]}` turn"
    return None


def supervision_default_faults(func: ast.AST) -> Iterator[tuple[ast.AST, str]]:
    """Default supervision flags of a message that mark a prompt (user/system/tool) turn as a target."""
    role_reads = _role_locals(func)
    for n in nodes_of(func, ast.Call, ast.Dict, ast.Assign):
        expr: ast.AST | None = None
        # message.get("loss_mask", DEFAULT)
        if (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr in ("get", "setdefault")
            and len(n.args) == 2
            and isinstance(n.args[0], ast.Constant)
            and isinstance(n.args[0].value, str)
            and _FLAG.search(n.args[0].value)
        ):
            expr = n.args[1]
        # {"role": role, "loss_mask": EXPR} / loss_mask = EXPR (reading the role)
        elif isinstance(n, ast.Dict):
            for k, v in zip(n.keys, n.values):
                if isinstance(k, ast.Constant) and isinstance(k.value, str) and _FLAG.search(k.value):
                    if any(isinstance(kk, ast.Constant) and kk.value == "role" for kk in n.keys):
                        expr = v
        elif isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            if _FLAG.search(n.targets[0].id) and _reads_role(n.value, role_reads):
                expr = n.value
        if expr is None:
            continue
        if not (isinstance(expr, ast.Constant) or _reads_role(expr, role_reads)):
            continue
        fault = _role_default_fault(expr, role_reads)
        if fault is not None:
            yield expr, fault


def _label_targets(stmt: ast.stmt) -> Iterator[tuple[ast.AST, ast.AST]]:
    """(label list, appended value) of `labels += V`, `labels.extend(V)`, `labels.append(V)`."""
    for n in _walk(stmt):
        if isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Add) and _is_labels(n.target):
            yield n.target, n.value
        elif (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr in ("extend", "append")
            and _is_labels(n.func.value)
            and n.args
        ):
            yield n.func.value, n.args[0]


def _is_labels(node: ast.AST) -> bool:
    name = _leaf_name(node)
    return name is not None and name.lower() in ("labels", "label_ids", "target_ids", "targets")


def _masked_value(node: ast.AST) -> bool:
    """Whether an appended label value is built from the ignore index (or is empty)."""
    for n in _walk(node):
        if isinstance(n, ast.Name) and "ignore" in n.id.lower():
            return True
        if isinstance(n, ast.Attribute) and "ignore" in n.attr.lower():
            return True
        if isinstance(n, ast.Constant) and n.value == -100:
            return True
    return False


def _flag_test(test: ast.AST, role_reads: set[str]) -> bool | None:
    """True when `test` is truthy for a supervised turn, False when truthy for an unsupervised one, None when it
    tests neither a supervision flag nor the role."""
    node = test
    flip = False
    while isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        flip, node = not flip, node.operand
    reads_flag = any(
        (isinstance(x, ast.Name) and _FLAG.search(x.id))
        or (isinstance(x, ast.Constant) and isinstance(x.value, str) and _FLAG.search(x.value))
        for x in _walk(node)
    )
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.comparators[0], ast.Constant):
        const = node.comparators[0].value
        if reads_flag and const in (0, 1) and isinstance(node.ops[0], (ast.Eq, ast.NotEq)):
            positive = (const == 1) == isinstance(node.ops[0], ast.Eq)
            return positive != flip
        if (
            _is_role(node.left, role_reads)
            and const == "assistant"
            and isinstance(node.ops[0], (ast.Eq, ast.NotEq))
        ):
            return isinstance(node.ops[0], ast.Eq) != flip
    if reads_flag and isinstance(node, (ast.Name, ast.Subscript)):
        return not flip
    return None


def unmasked_branch_faults(func: ast.AST) -> Iterator[tuple[ast.AST, str]]:
    """The unsupervised branch of a message's label builder appends token ids instead of the ignore index."""
    role_reads = _role_locals(func)
    for n in nodes_of(func, ast.If):
        if not isinstance(n, ast.If) or not n.orelse:
            continue
        positive = _flag_test(n.test, role_reads)
        if positive is None:
            continue
        body, orelse = (n.body, n.orelse) if positive else (n.orelse, n.body)
        sup = [v for s in body for _, v in _label_targets(s)]
        unsup = [v for s in orelse for _, v in _label_targets(s)]
        if not sup or not unsup:
            continue
        if any(_masked_value(v) for v in sup + unsup) and not any(_masked_value(v) for v in unsup):
            yield unsup[0], ast.unparse(unsup[0])
        elif not any(_masked_value(v) for v in unsup) and {ast.unparse(v) for v in unsup} <= {
            ast.unparse(v) for v in sup
        }:
            yield unsup[0], ast.unparse(unsup[0])


# ---------------------------------------------------------------------------------------------------------------
# Per-token means


def _reduction(call: ast.Call) -> str | None:
    for kw in call.keywords:
        if kw.arg == "reduction" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
            return kw.value.value
    return None


def _is_ce(call: ast.AST) -> bool:
    if not isinstance(call, ast.Call):
        return False
    name = call_name(call)
    return name in ("cross_entropy", "nll_loss")


def _divided(expr: ast.AST, call: ast.AST) -> bool:
    """Whether ``call`` sits under a division (or a `.mean()`) inside ``expr``."""
    for n in _walk(expr):
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div):
            if any(x is call for x in _walk(n.left)):
                return True
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "mean":
            if any(x is call for x in _walk(n.func.value)):
                return True
    return False


def hands_on_loss(func: ast.AST) -> set[str]:
    """The locals a function hands on as the step's loss: `outputs.loss = X`, `return X` of a `loss` name."""
    out: set[str] = set()
    for n in nodes_of(func, ast.Assign):
        if isinstance(n, ast.Assign) and len(n.targets) == 1:
            t = n.targets[0]
            if isinstance(t, ast.Attribute) and t.attr == "loss" and isinstance(n.value, ast.Name):
                out.add(n.value.id)
    return out


def unnormalised_losses(func: ast.AST) -> Iterator[tuple[ast.Call, str]]:
    """Cross-entropies taken as a token sum (``reduction="sum"`` / ``"none"`` then summed) and handed on as the
    step's loss with no division by a count. Yields (call, reduction)."""
    handed = hands_on_loss(func)
    divided_later: set[str] = set()
    for name, value in _assignments(func):
        if name in handed and isinstance(value, ast.BinOp) and isinstance(value.op, ast.Div):
            if name in _reads(value.left):
                divided_later.add(name)
    direct = [
        n.value
        for n in nodes_of(func, ast.Assign)
        if isinstance(n, ast.Assign)
        and len(n.targets) == 1
        and isinstance(n.targets[0], ast.Attribute)
        and n.targets[0].attr == "loss"
        and not isinstance(n.value, ast.Name)
    ]
    pairs = [
        (name, value) for name, value in _assignments(func) if name in handed and name not in divided_later
    ]
    for _, value in [*pairs, *(("", v) for v in direct)]:
        for call in _walk(value):
            if not _is_ce(call):
                continue
            red = _reduction(call)  # type: ignore[arg-type]
            if red in ("sum", "none") and not _divided(value, call):
                yield call, red  # type: ignore[misc]


def numel_denominators(func: ast.AST) -> Iterator[tuple[ast.BinOp, str]]:
    """A cross-entropy taken with ``ignore_index`` and ``reduction="sum"`` divided by every label position."""
    for n in nodes_of(func, ast.BinOp):
        if not (isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div)):
            continue
        ce = next((c for c in _walk(n.left) if _is_ce(c) and _reduction(c) == "sum"), None)  # type: ignore[arg-type]
        if ce is None or not any(kw.arg == "ignore_index" for kw in ce.keywords):  # type: ignore[attr-defined]
            continue
        for x in _walk(n.right):
            if (
                isinstance(x, ast.Call)
                and isinstance(x.func, ast.Attribute)
                and x.func.attr in ("numel", "size")
            ):
                yield n, ast.unparse(n.right)
                break
            if isinstance(x, ast.Call) and isinstance(x.func, ast.Name) and x.func.id == "len":
                yield n, ast.unparse(n.right)
                break
            if isinstance(x, ast.Attribute) and x.attr == "shape":
                yield n, ast.unparse(n.right)
                break


# ---------------------------------------------------------------------------------------------------------------
# Heads a spec's replacement serves

_HEAD_WORDS = (
    ("causal", ("forcausallm", "causallm", "causal_lm")),
    ("seq_cls", ("forsequenceclassification", "sequenceclassification", "seq_cls", "seqcls")),
    ("token_cls", ("fortokenclassification", "tokenclassification", "token_cls", "tokencls")),
    ("cond_gen", ("forconditionalgeneration", "conditionalgeneration", "cond_gen")),
)


def head_of_name(name: str) -> str | None:
    """The model head a class, target or replacement name is written for (causal / seq_cls / token_cls /
    cond_gen), or None."""
    low = name.lower()
    found = {head for head, words in _HEAD_WORDS if any(w in low for w in words)}
    return found.pop() if len(found) == 1 else None


def method_of_name(name: str) -> str | None:
    """`..._init_patched` -> "__init__", `..._forward_patched` -> "forward", else None."""
    low = name.lower()
    has_init = re.search(r"(?:^|_)init(?:_|$)", low) is not None
    has_fwd = "forward" in low
    if has_init != has_fwd:
        return "__init__" if has_init else "forward"
    return None


# ---------------------------------------------------------------------------------------------------------------
# Counts reduced over ranks

COUNT_WORDS = ("token", "count", "num_items", "num_valid", "_len", "denom")
_REDUCERS = frozenset({"all_reduce", "all_reduce_tensor", "reduce_across_ranks"})


def _counting(name: str) -> bool:
    low = name.lower()
    return any(w in low for w in COUNT_WORDS)


def _comprehension_sources(func: ast.AST) -> dict[str, ast.AST]:
    """Comprehension / loop targets -> the iterable they come from (`for k, v in counts.items()`)."""
    out: dict[str, ast.AST] = {}
    for n in nodes_of(func, ast.comprehension, ast.For):
        if isinstance(n, (ast.comprehension, ast.For)):
            for t in _walk(n.target):
                if isinstance(t, ast.Name):
                    out[t.id] = n.iter
    return out


def reduction_op(call: ast.Call, helper_mean: bool) -> str | None:
    """The reduction of an all-reduce call: `op=` (a string or `ReduceOp.X`), its second positional argument, else
    the default (SUM for `torch.distributed.all_reduce`, "mean" for VeOmni's helper when ``helper_mean``)."""
    op_node = next((kw.value for kw in call.keywords if kw.arg == "op"), None)
    if op_node is None and len(call.args) > 1 and isinstance(call.func, ast.Name):
        op_node = call.args[1]
    if op_node is not None:
        if isinstance(op_node, ast.Constant) and isinstance(op_node.value, str):
            return op_node.value.lower()
        if isinstance(op_node, ast.Attribute):
            return op_node.attr.lower()
        return None
    if isinstance(call.func, ast.Attribute):
        return "sum"
    return "mean" if helper_mean else None


def unsummed_count_values(func: ast.AST, helper_mean: bool) -> Iterator[tuple[ast.Call, str, str]]:
    """All-reduces of a token count whose result is used in place (a comprehension, a return, an argument: not a
    plain assignment, which NPU421 follows to its division) with a reduction other than a sum.
    Yields (call, count text, op)."""
    plain: set[int] = set()
    for n in nodes_of(func, ast.Assign, ast.Expr, ast.AnnAssign, ast.AugAssign):
        if isinstance(n, (ast.Assign, ast.Expr, ast.AnnAssign, ast.AugAssign)) and isinstance(
            n.value, ast.Call
        ):
            plain.add(id(n.value))
    sources = _comprehension_sources(func)
    fname = getattr(func, "name", "")
    for n in nodes_of(func, ast.Call):
        if not isinstance(n, ast.Call) or id(n) in plain or not n.args:
            continue
        callee = call_name(n)
        if callee not in _REDUCERS:
            continue
        arg = n.args[0]
        names = _reads(arg)
        counted = any(_counting(x) for x in names) or any(
            x in sources and any(_counting(y) for y in _reads(sources[x])) for x in names
        )
        if not counted and not (_counting(fname) and isinstance(arg, (ast.Name, ast.Call))):
            continue
        op = reduction_op(n, helper_mean)
        if op is not None and op not in ("sum", "reduceop.sum"):
            yield n, ast.unparse(arg), op


# ---------------------------------------------------------------------------------------------------------------
# Config fields an __init__ binds


def config_bindings(func: ast.AST) -> dict[str, tuple[str, ast.AST]]:
    """`self.X = config.Y` (or `getattr(config, "Y")`) in a function: X -> (Y, the value node)."""
    out: dict[str, tuple[str, ast.AST]] = {}
    for n in nodes_of(func, ast.Assign):
        if not (isinstance(n, ast.Assign) and len(n.targets) == 1):
            continue
        t, v = n.targets[0], n.value
        if not (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"):
            continue
        field_name = None
        if isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name) and v.value.id == "config":
            field_name = v.attr
        elif (
            isinstance(v, ast.Call)
            and isinstance(v.func, ast.Name)
            and v.func.id == "getattr"
            and len(v.args) == 2
            and isinstance(v.args[0], ast.Name)
            and v.args[0].id == "config"
            and isinstance(v.args[1], ast.Constant)
        ):
            field_name = str(v.args[1].value)
        if field_name is not None:
            out.setdefault(t.attr, (field_name, v))
    return out


def _encodes_header(value: ast.AST, role_reads: set[str]) -> bool:
    """`tokenizer.encode("<|im_start|>" + message["role"] + "\\n", ...)`: an encoding of a role header alone."""
    if not (isinstance(value, ast.Call) and value.args):
        return False
    callee = call_name(value)
    if callee not in ("encode", "tokenize", "convert_tokens_to_ids", "apply_chat_template"):
        return False
    text = value.args[0]
    reads = _reads(text)
    return (
        _reads_role(text, role_reads)
        and not any("content" in r or "text" in r for r in reads)
        and not any(
            isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and n.slice.value == "content"
            for n in _walk(text)
        )
    )


def supervised_header_faults(func: ast.AST) -> Iterator[tuple[ast.AST, str]]:
    """The supervised branch labels a message's ids whole, header included: the ids were built from an encoding
    of the role header alone and then extended with the content, and the labels take them unsliced."""
    role_reads = _role_locals(func)
    headers: set[str] = set()
    extended: set[str] = set()
    for n in nodes_of(func, ast.Assign, ast.AugAssign):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            if _encodes_header(n.value, role_reads):
                headers.add(n.targets[0].id)
        elif isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Add) and isinstance(n.target, ast.Name):
            extended.add(n.target.id)
    headers &= extended
    if not headers:
        return
    for n in nodes_of(func, ast.If):
        if not isinstance(n, ast.If):
            continue
        positive = _flag_test(n.test, role_reads)
        if positive is None:
            continue
        body = n.body if positive else n.orelse
        for stmt in body:
            for _, value in _label_targets(stmt):
                if isinstance(value, ast.Name) and value.id in headers:
                    yield value, value.id


# ---------------------------------------------------------------------------------------------------------------
# Custom autograd functions: what the forward keeps for the backward


def _gradient_site(bwd: ast.AST) -> ast.AST | None:
    """The first statement of a backward that reads its incoming gradient (where a lost factor belongs)."""
    args = bwd.args.args  # type: ignore[attr-defined]
    if len(args) < 2:
        return None
    grad = args[1].arg
    for stmt in _walk(bwd):
        if isinstance(stmt, (ast.Assign, ast.AugAssign, ast.Return)) and stmt.value is not None:
            if grad in _reads(stmt.value):
                return stmt
    return None


def saved_but_unused(cls: ast.ClassDef) -> Iterator[tuple[ast.AST, str]]:
    """In an autograd Function, values the forward keeps for the backward (`ctx.x = ...`, `ctx.save_for_backward(a,
    b)`) that the backward never reads: unpacked from `ctx.saved_tensors` and dropped, or a `ctx` attribute never
    read (``backward.kept_for_backward``, the one saved-for-backward analysis). Yields (the backward's statement
    that uses the incoming gradient, else where the value is kept, the name)."""
    methods = {f.name: f for f in cls.body if isinstance(f, _FUNCS)}
    fwd, bwd = methods.get("forward"), methods.get("backward")
    if fwd is None or bwd is None or not fwd.args.args or not bwd.args.args:
        return
    site = _gradient_site(bwd)
    for kept in kept_for_backward(cls):
        if not kept.read:
            yield site or kept.node, kept.name


# ---------------------------------------------------------------------------------------------------------------
# Precision of a routing projection


def _fp32_cast(node: ast.AST) -> bool:
    """`x.float()`, `x.type(torch.float32)`, `x.to(torch.float32)`, `dtype=torch.float32` / `torch.float`."""
    for n in _walk(node):
        if isinstance(n, ast.Attribute) and n.attr in ("float32", "float") and isinstance(n.value, ast.Name):
            if n.value.id == "torch":
                return True
        if (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "float"
            and not n.args
        ):
            return True
    return False


_PROJECTIONS = frozenset({"linear", "matmul", "mm", "bmm", "einsum"})


def fp32_projections(func: ast.AST) -> list[ast.Call]:
    """Projections (`F.linear`, `matmul`, `@` operands) whose inputs are cast to float32 in the call itself."""
    out: list[ast.Call] = []
    for n in nodes_of(func, ast.Call):
        if isinstance(n, ast.Call):
            name = call_name(n)
            if name in _PROJECTIONS and any(_fp32_cast(a) for a in n.args):
                out.append(n)
    return out


# ---------------------------------------------------------------------------------------------------------------
# Packed-sample boundaries


def _is_ignore(node: ast.AST) -> bool:
    if isinstance(node, ast.Name):
        return "ignore" in node.id.lower()
    if isinstance(node, ast.Attribute):
        return "ignore" in node.attr.lower()
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
    ):
        return node.operand.value == 100
    return False


def _loop_side(loop: ast.For) -> str | None:
    """`range(1, n)` -> "skips_first"; `range(n - 1)` / `range(0, n - 1)` -> "skips_last"; else None."""
    it = loop.iter
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" and it.args):
        return None
    args = it.args
    if len(args) >= 2 and int_value(args[0]) == 1:
        return "skips_first"
    stop = args[-1] if len(args) <= 2 else args[1]
    if isinstance(stop, ast.BinOp) and isinstance(stop.op, ast.Sub) and int_value(stop.right) == 1:
        if len(args) == 1 or int_value(args[0]) == 0:
            return "skips_last"
    return None


def boundary_side_faults(func: ast.AST) -> Iterator[tuple[ast.AST, str]]:
    """A loop over packed samples masks the boundary label at the wrong end: a loop that skips the first sample
    masks each sample's last label (the boundary after sample i-1 is sample i's first label), or a loop that skips
    the last sample masks each sample's first one."""
    for loop in nodes_of(func, ast.For):
        if not (isinstance(loop, ast.For) and isinstance(loop.target, ast.Name)):
            continue
        side = _loop_side(loop)
        if side is None:
            continue
        var = loop.target.id
        for n in _walk(loop):
            if not (isinstance(n, ast.Assign) and len(n.targets) == 1 and _is_ignore(n.value)):
                continue
            t = n.targets[0]
            if not (isinstance(t, ast.Subscript) and isinstance(t.value, ast.Subscript)):
                continue
            inner = t.value.slice
            if not (isinstance(inner, ast.Name) and inner.id == var):
                continue
            pos = t.slice.elts[-1] if isinstance(t.slice, ast.Tuple) else t.slice
            idx = int_value(pos)
            if side == "skips_first" and idx == -1:
                yield t, "the loop starts at the second sample, so the boundary is each sample's first label"
            elif side == "skips_last" and idx == 0:
                yield t, "the loop stops before the last sample, so the boundary is each sample's last label"


# ---------------------------------------------------------------------------------------------------------------
# Loss-token counts and expert selection


def _labelish(node: ast.AST) -> bool:
    if isinstance(node, ast.Name):
        return "label" in node.id.lower()
    if isinstance(node, ast.Attribute):
        return "label" in node.attr.lower()
    if isinstance(node, ast.Subscript):
        s = node.slice
        return isinstance(s, ast.Constant) and isinstance(s.value, str) and "label" in s.value.lower()
    return False


def _token_count_target(node: ast.AST) -> str | None:
    text = ast.unparse(node)
    low = text.lower()
    if any(w in low for w in ("ignore", "pad", "mask", "total_len", "seq_len", "position")):
        return None
    if "token" in low or "num_items" in low or "num_valid" in low or "valid_count" in low:
        return text
    return None


def token_count_faults(func: ast.AST) -> Iterator[tuple[ast.AST, str]]:
    """A loss-token count (a target named for tokens / `num_items` / `num_valid`) taken from the labels without
    excluding the ignored positions: `labels.numel()`, `len(labels)`, `labels.shape`, or `labels == IGNORE`."""
    for n in nodes_of(func, ast.Assign, ast.AugAssign):
        if isinstance(n, ast.Assign) and len(n.targets) == 1:
            target, value = n.targets[0], n.value
        elif isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Add):
            target, value = n.target, n.value
        else:
            continue
        name = _token_count_target(target)
        if name is None:
            continue
        compares = [x for x in _walk(value) if isinstance(x, ast.Compare)]
        if any(
            isinstance(op, ast.Eq) and any(_is_ignore(c) or _is_ignore(x.left) for c in x.comparators)
            for x in compares
            for op in x.ops
        ):
            yield value, f"`{name}` counts the labels equal to the ignore index, the positions the loss skips"
            continue
        if compares or not any(_labelish(x) for x in _walk(value)):
            continue
        for x in _walk(value):
            sized = None
            if (
                isinstance(x, ast.Call)
                and isinstance(x.func, ast.Attribute)
                and x.func.attr in ("numel", "size")
            ):
                sized = x.func.value
            elif isinstance(x, ast.Call) and isinstance(x.func, ast.Name) and x.func.id == "len" and x.args:
                sized = x.args[0]
            elif isinstance(x, ast.Attribute) and x.attr == "shape":
                sized = x.value
            if sized is not None and any(_labelish(y) for y in _walk(sized)):
                yield (
                    value,
                    f"`{name}` counts every label position, the ignored ones (padding, prompts) included",
                )
                break


_ALL_EXPERTS = re.compile(
    r"^(?:num_experts|n_routed_experts|num_local_experts|n_experts|num_routed_experts)$"
)


def topk_over_all_experts(func: ast.AST) -> Iterator[ast.Call]:
    """`torch.topk(scores, self.num_experts, ...)`: a router's top-k taken over the number of all experts."""
    for n in nodes_of(func, ast.Call):
        if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "topk"):
            continue
        k = n.args[1] if len(n.args) > 1 else next((kw.value for kw in n.keywords if kw.arg == "k"), None)
        if k is None and isinstance(n.func.value, ast.Name) and n.func.value.id != "torch" and n.args:
            k = n.args[0]
        name = _leaf_name(k) if k is not None else None
        if name and _ALL_EXPERTS.match(name):
            yield n


_TOP_K = re.compile(r"top_?k|experts_per_tok|per_token|topk")


def aux_loss_top_k_missing(call: ast.Call) -> bool:
    """A load-balancing loss call that passes the number of experts but no top-k (the callee's default `top_k`
    then stands in for the model's `num_experts_per_tok`)."""
    callee = call_name(call)
    if "load_balancing" not in callee.lower():
        return False
    args = [*call.args, *(kw.value for kw in call.keywords)]
    names = {_leaf_name(a) or "" for a in args}
    if any(kw.arg in ("top_k", "topk", "k", "num_experts_per_tok") for kw in call.keywords):
        return False
    if any(_TOP_K.search(n.lower()) for n in names):
        return False
    if any(isinstance(a, ast.Starred) for a in call.args) or any(kw.arg is None for kw in call.keywords):
        return False
    return any(_ALL_EXPERTS.match(n) for n in names)


def _upcasts(node: ast.AST) -> bool:
    for n in _walk(node):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
            if n.func.attr in ("float", "double") and not n.args:
                return True
            if n.func.attr in ("to", "type") and any(
                _fp32_cast(a) for a in (*n.args, *(k.value for k in n.keywords))
            ):
                return True
    return False


def uncast_output_logits(func: ast.AST) -> Iterator[tuple[ast.AST, str]]:
    """A cross-entropy handed on as the step's loss over logits read from a model output (`outputs.logits`) that
    the function never casts to float32. Yields (the logits argument, its name)."""
    handed = hands_on_loss(func)
    direct = any(
        isinstance(n, ast.Assign)
        and len(n.targets) == 1
        and isinstance(n.targets[0], ast.Attribute)
        and n.targets[0].attr == "loss"
        for n in nodes_of(func, ast.Assign)
    )
    if not handed and not direct:
        return
    from_output: set[str] = set()
    for name, value in _assignments(func):
        if any(isinstance(x, ast.Attribute) and x.attr == "logits" for x in _walk(value)):
            from_output.add(name)
    from_output = _tainted(func, from_output)
    cast: set[str] = {name for name, value in _assignments(func) if name in from_output and _upcasts(value)}
    for call in nodes_of(func, ast.Call):
        if not (_is_ce(call) and call.args):  # type: ignore[attr-defined]
            continue
        arg = call.args[0]  # type: ignore[attr-defined]
        if isinstance(arg, ast.Name) and arg.id in from_output and arg.id not in cast and not _upcasts(arg):
            yield arg, arg.id


# ---------------------------------------------------------------------------------------------------------------
# Normalisers: how a loss's sum is divided
#
# A loss starts as one value per element (a token's cross-entropy, a latent's squared error, a preference pair's
# logistic loss) and becomes the step's scalar by a *normaliser*: the mean over the elements, a sum divided by a
# count (the valid labels, `num_items_in_batch`, a mask's sum), or a sum handed to a helper that divides it. The
# upstream forwards and VeOmni's kernels always hand on a per-element mean: `mean_global_loss` weights it by the
# micro-batch's share of the step's tokens, and the chunked kernels divide every chunk by the whole batch's count
# before summing the chunks. These readers find the places where a function breaks that: an element sum handed on
# undivided (`summed_losses`), a masked sum divided by every position (`every_position`), a chunk normalised by its
# own count (`chunk_normaliser_faults`).

_ELEMENTWISE_LOSSES = frozenset(
    {
        "mse_loss",
        "l1_loss",
        "smooth_l1_loss",
        "huber_loss",
        "cross_entropy",
        "nll_loss",
        "binary_cross_entropy",
        "binary_cross_entropy_with_logits",
        "kl_div",
    }
)
_REDUCTIONS = frozenset({"sum", "mean", "nansum", "nanmean"})
_SIZE_CALLS = frozenset({"numel", "size", "nelement"})


def _callee(node: ast.AST) -> str:
    if not isinstance(node, ast.Call):
        return ""
    return call_name(node)


def reduction_of(node: ast.AST) -> tuple[str, ast.AST] | None:
    """`E.sum(...)` / `torch.sum(E, ...)` (and mean) -> ("sum", E); None for anything else."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return None
    name = node.func.attr
    if name not in _REDUCTIONS:
        return None
    kind = "sum" if "sum" in name else "mean"
    if isinstance(node.func.value, ast.Name) and node.func.value.id == "torch":
        return (kind, node.args[0]) if node.args else None
    return kind, node.func.value


def _squared_difference(node: ast.AST) -> bool:
    """`(a - b) ** 2`, `(a - b).pow(2)`, `torch.square(a - b)`, `(a - b).abs()`: a per-element regression loss."""
    base: ast.AST | None = None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        base = node.left
    elif isinstance(node, ast.Call) and _callee(node) in ("pow", "square", "abs"):
        f = node.func
        if isinstance(f, ast.Attribute) and not (isinstance(f.value, ast.Name) and f.value.id == "torch"):
            base = f.value
        elif node.args:
            base = node.args[0]
    return isinstance(base, ast.BinOp) and isinstance(base.op, ast.Sub)


def _unreduced_loss_call(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and _callee(node) in _ELEMENTWISE_LOSSES and _reduction(node) == "none"


def _has_reduction_or_division(node: ast.AST) -> bool:
    for n in _walk(node):
        if reduction_of(n) is not None:
            return True
        if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Div, ast.FloorDiv)):
            return True
    return False


def elementwise_losses(func: ast.AST) -> set[str]:
    """The locals of ``func`` that hold one loss value per element: an unreduced loss call
    (`F.mse_loss(p, t, reduction="none")`), a squared difference named for a loss or an error
    (`per_element_loss = (pred - target).pow(2)`), a per-example loss vector a loss function returns
    (`losses, chosen, rejected = self.dpo_loss(...)`), and what is built from these without a reduction
    (`masked_loss = per_element_loss * loss_mask`)."""
    out: set[str] = set()
    for n in nodes_of(func, ast.Assign):
        if not isinstance(n, ast.Assign) or len(n.targets) != 1:
            continue
        target, value = n.targets[0], n.value
        if isinstance(target, ast.Name):
            low = target.id.lower()
            if any(_unreduced_loss_call(x) for x in _walk(value)) and not _has_reduction_or_division(value):
                out.add(target.id)
            elif ("loss" in low or "err" in low) and any(_squared_difference(x) for x in _walk(value)):
                if not _has_reduction_or_division(value):
                    out.add(target.id)
        elif isinstance(target, ast.Tuple) and isinstance(value, ast.Call):
            callee = _callee(value).lower()
            if callee.endswith(("loss", "losses")):
                for elt in target.elts:
                    if isinstance(elt, ast.Name) and elt.id.lower().endswith("losses"):
                        out.add(elt.id)
    changed = True
    pairs = [(name, value) for name, value in _assignments(func)]
    while changed:
        changed = False
        for name, value in pairs:
            if name not in out and _reads(value) & out and not _has_reduction_or_division(value):
                if not any(
                    isinstance(x, ast.Call) and _callee(x) in ("append", "stack", "cat") for x in _walk(value)
                ):
                    out.add(name)
                    changed = True
    return out


def _returns_count(func: ast.AST) -> bool:
    """The function hands back a count with its value (`return loss_sum, num_tokens`): the caller divides."""
    for n in nodes_of(func, ast.Return):
        value = n.value if isinstance(n, ast.Return) else None
        if isinstance(value, (ast.Tuple, ast.Dict)):
            for x in _walk(value):
                if isinstance(x, ast.Name) and _counting(x.id):
                    return True
    return False


def _normalised(func: ast.AST, names: set[str]) -> bool:
    """Whether one of ``names`` (a summed loss and what is built from it) is divided later: `x / n`, `x /= n`,
    `x.div(n)`, or handed to a call together with a count (`reduce_sequence_parallel_loss(x, num_tokens)`)."""
    for n in _walk(func):
        if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Div, ast.FloorDiv)) and _reads(n.left) & names:
            return True
        if isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Div) and _reads(n.target) & names:
            return True
        if isinstance(n, ast.Call):
            if _callee(n) in ("div", "div_", "true_divide") and _reads(n) & names:
                return True
            args = [*n.args, *(k.value for k in n.keywords)]
            if any(_reads(a) & names for a in args) and any(
                isinstance(x, ast.Name) and _counting(x.id) and not (_reads(a) & names)
                for a in args
                for x in _walk(a)
            ):
                return True
    return False


def summed_losses(func: ast.AST) -> Iterator[tuple[ast.AST, str, str]]:
    """Per-element losses summed over their elements into a loss (`per_sample_loss = err.view(b, -1).sum(1)`,
    `loss = losses.sum()`) that nothing divides afterwards: the loss scales with the number of elements (tokens,
    latent positions, pairs) where upstream hands on their mean. Yields (the sum call, the summed local, the
    loss local)."""
    # the cheap test first: a loss local assigned a sum; most functions have none, and the per-element
    # locals (a fixpoint over every assignment) are then never needed
    sums: list[tuple[ast.AST, ast.Name, ast.AST, ast.AST]] = []
    for n in nodes_of(func, ast.Assign, ast.AugAssign):
        target = (
            n.targets[0] if isinstance(n, ast.Assign) and len(n.targets) == 1 else getattr(n, "target", None)
        )
        if not isinstance(target, ast.Name) or "loss" not in target.id.lower():
            continue
        value = n.value  # type: ignore[union-attr]
        top = strip_shape_ops(value)
        red = reduction_of(top)
        if red is None or red[0] != "sum":
            continue
        sums.append((n, target, top, red[1]))
    if not sums:
        return
    elementwise = elementwise_losses(func)
    if not elementwise or _returns_count(func):
        return
    for n, target, top, reduced in sums:
        operand = strip_shape_ops(reduced)
        summed = _reads(operand) & elementwise
        if (
            not summed
            or _has_reduction_or_division(operand)
            or any(_unreduced_loss_call(x) and _is_ce(x) for x in _walk(operand))
        ):
            continue
        if _normalised(func, _tainted_after(func, n, target.id)):
            continue
        yield top, sorted(summed)[0], target.id


_SHAPE_OPS = frozenset({"view", "reshape", "flatten", "float", "to", "contiguous", "squeeze", "unsqueeze"})


def strip_shape_ops(node: ast.AST) -> ast.AST:
    while (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _SHAPE_OPS
    ):
        node = node.func.value
    return node


def _tainted_after(func: ast.AST, stmt: ast.AST, name: str) -> set[str]:
    """What is built from ``name`` once ``stmt`` has rebound it (``name`` held per-element values before)."""
    out = {name}
    after = [(t, v) for t, v in _assignments(func) if getattr(v, "lineno", 0) > getattr(stmt, "lineno", 0)]
    appends = [
        (c.func.value.id, c)
        for c in nodes_of(func, ast.Call)
        if isinstance(c, ast.Call)
        and _callee(c) == "append"
        and isinstance(c.func, ast.Attribute)
        and isinstance(c.func.value, ast.Name)
        and c.lineno > getattr(stmt, "lineno", 0)
    ]
    changed = True
    while changed:
        changed = False
        for t, v in after:
            if t not in out and _reads(v) & out:
                out.add(t)
                changed = True
        for lst, call in appends:
            if lst not in out and _reads(call) & out:
                out.add(lst)
                changed = True
    return out


def shape_names(func: ast.AST) -> set[str]:
    """Locals bound to a dimension of a tensor: `b, c, f, h, w = x.shape`, `n = x.size(1)`, `t = x.shape[1]`."""
    out: set[str] = set()
    for n in nodes_of(func, ast.Assign):
        if not isinstance(n, ast.Assign) or len(n.targets) != 1:
            continue
        target, value = n.targets[0], n.value
        sized = (isinstance(value, ast.Attribute) and value.attr == "shape") or (
            isinstance(value, ast.Call) and _callee(value) == "size"
        )
        if isinstance(target, ast.Tuple) and sized:
            out.update(e.id for e in target.elts if isinstance(e, ast.Name))
        elif isinstance(target, ast.Name):
            if (
                isinstance(value, ast.Subscript)
                and isinstance(value.value, ast.Attribute)
                and value.value.attr == "shape"
            ) or sized:
                out.add(target.id)
    return out


def every_position(node: ast.AST, sizes: set[str]) -> str | None:
    """How ``node`` counts every position of a tensor rather than the ones a mask keeps: `x.numel()`, `len(x)`,
    a shape, or a product of dimensions (`float(F * H * W)` with `B, C, F, H, W = x.shape`)."""
    for n in _walk(node):
        if isinstance(n, ast.Call) and _callee(n) in _SIZE_CALLS and isinstance(n.func, ast.Attribute):
            return ast.unparse(n)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "len":
            return ast.unparse(n)
        if isinstance(n, ast.Attribute) and n.attr == "shape":
            return ast.unparse(n)
    inner = node
    while isinstance(inner, ast.Call) and _callee(inner) in ("float", "int") and len(inner.args) == 1:
        inner = inner.args[0]
    names = [x for x in _walk(inner) if isinstance(x, ast.Name)]
    only_products = all(
        isinstance(x, (ast.Name, ast.Load, ast.Mult, ast.Constant))
        or (isinstance(x, ast.BinOp) and isinstance(x.op, ast.Mult))
        for x in _walk(inner)
    )
    if names and only_products and all(x.id in sizes for x in names):
        return ast.unparse(node)
    return None


# per-chunk normalisers

_NORMALISER_KEYS = ("num_items_in_batch",)


def _chunk_loop_vars(func: ast.AST) -> list[tuple[ast.AST, set[str]]]:
    """Comprehensions and loops over chunks (an iterable built by `torch.split`/`.chunk`/`.split`, named for
    chunks, or `range(len(<chunks>))`), with the names their targets bind."""
    chunky: set[str] = set()
    for name, value in _assignments(func):
        if "chunk" in name.lower() or any(
            _callee(x) in ("split", "chunk", "tensor_split") for x in _walk(value)
        ):
            chunky.add(name)
    out: list[tuple[ast.AST, set[str]]] = []
    gens: list[tuple[ast.AST, ast.AST, ast.AST]] = []
    for n in _walk(func):
        if isinstance(n, (ast.ListComp, ast.GeneratorExp, ast.DictComp, ast.SetComp)):
            gens.extend((n, g.target, g.iter) for g in n.generators)
        elif isinstance(n, ast.For):
            gens.append((n, n.target, n.iter))
    for owner, target, it in gens:
        if _reads(it) & chunky or any(_callee(x) in ("split", "chunk") for x in _walk(it)):
            out.append((owner, {x.id for x in _walk(target) if isinstance(x, ast.Name)}))
    return out


def chunk_normaliser_faults(func: ast.AST) -> Iterator[tuple[ast.AST, str]]:
    """The normaliser each chunk of a chunked loss receives (`{"num_items_in_batch": ...}` built per chunk) is the
    chunk's own count or nothing (`None`): each chunk becomes a mean over its own tokens and the chunk losses,
    summed, are a sum of means instead of the batch's per-token mean. Yields (the value, what it is)."""
    nones = {
        name for name, value in _assignments(func) if isinstance(value, ast.Constant) and value.value is None
    }
    rebound = {
        name
        for name, value in _assignments(func)
        if not (isinstance(value, ast.Constant) and value.value is None)
    }
    for owner, loop_vars in _chunk_loop_vars(func):
        for n in _walk(owner):
            pairs: list[tuple[str, ast.AST]] = []
            if isinstance(n, ast.Dict):
                pairs = [
                    (k.value, v)
                    for k, v in zip(n.keys, n.values)
                    if isinstance(k, ast.Constant) and isinstance(k.value, str)
                ]
            elif isinstance(n, ast.Call):
                pairs = [(k.arg, k.value) for k in n.keywords if k.arg]
            for key, value in pairs:
                if key not in _NORMALISER_KEYS:
                    continue
                if isinstance(value, ast.Constant) and value.value is None:
                    yield value, "None"
                elif isinstance(value, ast.Name) and value.id in nones and value.id not in rebound:
                    yield value, f"`{value.id}`, which is None"
                elif _reads(value) & loop_vars:
                    yield value, f"`{ast.unparse(value)}`, the chunk's own count"


def _under_divisor(expr: ast.AST, name: str) -> bool:
    """Whether every read of ``name`` in ``expr`` sits in the divisor of a division (`1 / (2 * beta)`)."""
    divisor_ids: set[int] = set()
    for n in _walk(expr):
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div):
            divisor_ids.update(id(x) for x in _walk(n.right))
    reads = [x for x in _walk(expr) if isinstance(x, ast.Name) and x.id == name]
    return bool(reads) and all(id(x) in divisor_ids for x in reads)


def squared_target_faults(func: ast.AST) -> Iterator[tuple[ast.AST, str]]:
    """IPO's squared loss `(margin - 1 / (2 * beta)) ** 2` regresses the margin to a target that shrinks as the
    temperature grows: the temperature sits in the target's divisor. A target that multiplies by it
    (`1 / 2 * beta`, precedence) or reads it outside a divisor regresses to another margin. Yields (target,
    what)."""
    temp = temperature_of(func)
    if temp is None:
        return
    margins = _margins(func)
    for n in nodes_of(func, ast.BinOp):
        if not (isinstance(n, ast.BinOp) and isinstance(n.op, ast.Pow)):
            continue
        if not (isinstance(n.right, ast.Constant) and n.right.value == 2):
            continue
        base = n.left
        if not (isinstance(base, ast.BinOp) and isinstance(base.op, ast.Sub)):
            continue
        if not (_reads(base.left) & margins):
            continue
        target = base.right
        if temp in _reads(target) and not _under_divisor(target, temp):
            yield target, f"the squared loss's target `{ast.unparse(target)}` multiplies by `{temp}`"


# ---------------------------------------------------------------------------------------------------------------
# Upstream copies: a generated module's copy of upstream code keeps upstream's numerics

_COPY_REDUCERS = frozenset(
    {"sum", "mean", "softmax", "log_softmax", "logsumexp", "amax", "norm", "var", "cumsum"}
)
_LOSS_CALLEE = re.compile(
    r"cross_?entropy|crossentropyloss|nll_?loss|mse_?loss|kl_?div|l1_?loss|bce|loss_function|forcausallmloss",
    re.I,
)
_LOSS_KEYWORDS = frozenset(
    {"ignore_index", "reduction", "label_smoothing", "reduce", "size_average", "num_items_in_batch", "weight"}
)
_EPS = re.compile(r"(?:^|_)(?:eps|epsilon)(?:_|$)|^variance_epsilon$")


def _is_fp32(node: ast.AST) -> bool:
    """``torch.float32`` / ``torch.float`` (or a bare ``float32``)."""
    return (isinstance(node, ast.Attribute) and node.attr in ("float32", "float")) or (
        isinstance(node, ast.Name) and node.id == "float32"
    )


def _is_dtype(node: ast.AST) -> bool:
    """``x.dtype``, ``input_dtype``: a dtype read from a tensor or kept in a local (a cast back)."""
    name = last_name(node) or ""
    return name.endswith("dtype")


def _is_eps(node: ast.AST) -> bool:
    name = last_name(node)
    return name is not None and _EPS.search(name) is not None


def _dim_of(call: ast.Call, functional: bool) -> str:
    for kw in call.keywords:
        if kw.arg in ("dim", "axis"):
            return ast.unparse(kw.value)
    index = 1 if functional else 0
    return ast.unparse(call.args[index]) if len(call.args) > index else "all"


def numeric_features(stmts: list[ast.stmt]) -> Counter[tuple[str, ...]]:
    """What a run of statements computes, as far as a copy of upstream code must keep it: fp32 upcasts, eps
    added to a variance, calls of the module's norm submodules, ``1 + weight`` offsets, reductions with their
    axis, the polarity of each tested flag, and the keywords of loss calls (ignore index, reduction)."""
    out: Counter[tuple[str, ...]] = Counter()
    for stmt in stmts:
        for node in walk(stmt):
            if isinstance(node, ast.Call):
                func = node.func
                attr = call_name(node)
                if isinstance(func, ast.Attribute):
                    if attr == "float" and not node.args:
                        out["fp32",] += 1
                    elif attr in ("to", "type") and any(_is_fp32(a) for a in node.args):
                        out["fp32",] += 1
                    elif attr == "type_as" or (attr == "to" and any(_is_dtype(a) for a in node.args)):
                        out["cast",] += 1
                    if (
                        isinstance(func.value, ast.Name)
                        and func.value.id == "self"
                        and "norm" in attr.lower()
                    ):
                        out["norm", attr] += 1
                if attr in _COPY_REDUCERS:
                    functional = (
                        isinstance(func, ast.Attribute)
                        and isinstance(func.value, ast.Name)
                        and (func.value.id in ("torch", "F", "functional"))
                    )
                    out["reduce", attr, _dim_of(node, functional)] += 1
                if _LOSS_CALLEE.search(attr or ""):
                    for kw in node.keywords:
                        if kw.arg in _LOSS_KEYWORDS:
                            out["losskw", attr, kw.arg, ast.unparse(kw.value)] += 1
            elif isinstance(node, ast.keyword) and node.arg == "dtype" and _is_fp32(node.value):
                out["fp32",] += 1
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
                scaled = coefficient_scope(node)
                if scaled is not None:
                    out["scale", scaled[0], str(scaled[1])] += 1
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
                if _is_eps(node.left) or _is_eps(node.right):
                    out["eps",] += 1
                elif _offset_add(node):
                    out["offset",] += 1
                    if _offset_upcast(node):
                        out["offset32",] += 1
                elif (expanded := _expanded_offset(node)) is not None:
                    out["offset",] += 1  # ``x + x * weight``: ``x * (1 + weight)`` expanded into a sum
                    if _upcast(expanded):
                        out["offset32",] += 1
    return out


def _expanded_offset(node: ast.BinOp) -> ast.expr | None:
    """The weight of ``x + x * weight`` (either order of the sum and of the product): the ``1 + weight``
    offset (Gemma's RMSNorm) written as a sum, where no ``1 + weight`` is ever formed in the weight's dtype."""
    found = _expanded(node)
    return found[1] if found is not None else None


def _expanded(node: ast.BinOp) -> tuple[ast.expr, ast.expr] | None:
    """``(x, weight)`` of ``x + x * weight`` (either order of the sum and of the product)."""
    for x, prod in ((node.left, node.right), (node.right, node.left)):
        if isinstance(prod, ast.BinOp) and isinstance(prod.op, ast.Mult):
            for a, w in ((prod.left, prod.right), (prod.right, prod.left)):
                if _weight_term(w) and same_node(a, x):
                    return x, w
    return None


class _OffsetForm(ast.NodeTransformer):
    """``x * (1 + w)`` and ``x + x * w`` (``w`` a weight, either order) as one form, ``x.__offset__(w)``."""

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.Add):
            found = _expanded(node)
            if found is not None:
                return ast.Call(ast.Attribute(found[0], "__offset__", ast.Load()), [found[1]], [])
        elif isinstance(node.op, ast.Mult):
            for x, add in ((node.left, node.right), (node.right, node.left)):
                if isinstance(add, ast.BinOp) and isinstance(add.op, ast.Add) and _offset_add(add):
                    w = add.right if isinstance(add.left, ast.Constant) else add.left
                    return ast.Call(ast.Attribute(x, "__offset__", ast.Load()), [w], [])
        return node


def _offset_key(stmt: ast.stmt) -> str:
    """A statement's canonical key with every ``1 + weight`` offset in one form (expanded or not)."""
    return ast.dump(_OffsetForm().visit(_Canon().visit(copy_tree(stmt))))


def _weight_term(n: ast.AST) -> bool:
    """``self.weight``, or it cast (``.float()``, ``.to(...)``)."""
    while isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("float", "to"):
        n = n.func.value
    return isinstance(n, ast.Attribute) and n.attr == "weight"


def _upcast(side: ast.AST) -> bool:
    return (
        isinstance(side, ast.Call)
        and isinstance(side.func, ast.Attribute)
        and (
            (side.func.attr == "float" and not side.args)
            or (side.func.attr in ("to", "type") and any(_is_fp32(a) for a in side.args))
        )
    )


_COEFFICIENT = re.compile(r"(?:^|_)coeff?(?:icient)?(?:_|$)")


def _additive_terms(node: ast.AST) -> int:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub):
        return _additive_terms(node.left) + _additive_terms(node.right)
    return 1


def coefficient_scope(node: ast.BinOp) -> tuple[str, int] | None:
    """``(coefficient, terms)`` for a product of a named loss coefficient (``self.router_aux_loss_coef``) and
    an expression: how many added terms the coefficient scales (``coef * aux`` 1, ``coef * (lm + aux)`` 2)."""
    for coef, other in ((node.left, node.right), (node.right, node.left)):
        name = last_name(coef)
        if name is not None and _COEFFICIENT.search(name):
            return ast.unparse(coef), _additive_terms(other)
    return None


def _offset_upcast(node: ast.BinOp) -> bool:
    """Whether a ``1 + weight`` offset upcasts the weight before the addition (``1 + self.weight.float()``):
    the sum formed in fp32, where the small learned offsets of a zero-centred weight survive."""
    side = node.right if isinstance(node.left, ast.Constant) else node.left
    return (
        isinstance(side, ast.Call)
        and isinstance(side.func, ast.Attribute)
        and (
            (side.func.attr == "float" and not side.args)
            or (side.func.attr in ("to", "type") and any(_is_fp32(a) for a in side.args))
        )
    )


def _offset_add(node: ast.BinOp) -> bool:
    def weight(n: ast.AST) -> bool:
        while (
            isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("float", "to")
        ):
            n = n.func.value
        return isinstance(n, ast.Attribute) and n.attr == "weight"

    def one(n: ast.AST) -> bool:
        return isinstance(n, ast.Constant) and type(n.value) in (int, float) and n.value == 1

    return (one(node.left) and weight(node.right)) or (one(node.right) and weight(node.left))


_FEATURE_TEXT = {
    "fp32": "drops an fp32 upcast upstream makes",
    "cast": "drops a cast back to the input's dtype upstream makes",
    "eps": "no longer adds the norm's eps the way upstream does",
    "norm": "skips a norm submodule upstream calls",
    "offset": "changes the `1 + weight` offset",
    "scale": "changes which terms a loss coefficient scales",
    "offset32": "forms `1 + weight` in the parameter's dtype, where upstream upcasts the weight first",
    "reduce": "changes a reduction (its op or axis)",
    "flag": "inverts a flag upstream tests",
    "losskw": "changes a loss call's keyword (ignore index / reduction)",
}


def _feature_fault(theirs: list[ast.stmt], mine: list[ast.stmt]) -> tuple[str, str] | None:
    """The first numeric feature upstream's statements have and the copy's lack (or change): (kind, detail)."""
    up, cp = numeric_features(theirs), numeric_features(mine)
    if up == cp:
        return None
    for key, count in up.items():
        kind = key[0]
        if cp.get(key, 0) >= count:
            continue
        if kind in ("fp32", "eps", "offset", "cast", "offset32"):
            return kind, ""
        if kind == "norm":
            return kind, f"`self.{key[1]}`"
        if kind == "reduce":
            return kind, f"upstream's `.{key[1]}(dim={key[2]})`"
        if kind == "losskw":
            return kind, f"upstream's `{key[1]}(..., {key[2]}={key[3]})`"
        if kind == "scale" and any(k[0] == "scale" and k[1] == key[1] for k in cp):
            return kind, f"upstream's `{key[1]}` multiplies {key[2]} term(s)"
    for key, count in cp.items():  # a loss keyword or offset the copy adds
        if key[0] in ("losskw", "offset") and up.get(key, 0) < count:
            detail = f"`{key[2]}={key[3]}` added to `{key[1]}`" if key[0] == "losskw" else ""
            return key[0], detail
    return None


def _negation(a: ast.expr, b: ast.expr) -> bool:
    return isinstance(b, ast.UnaryOp) and isinstance(b.op, ast.Not) and same_node(a, b.operand)


def _inverted_flag(up: list[ast.stmt], cp: list[ast.stmt]) -> str | None:
    """The flag an ``if`` of the copy tests the other way round around upstream's very body (``if flag: B``
    copied as ``if not flag: B``); None otherwise."""
    if len(up) != 1 or len(cp) != 1 or not isinstance(up[0], ast.If) or not isinstance(cp[0], ast.If):
        return None
    a, b = up[0], cp[0]
    if not (len(a.body) == len(b.body) and all(same_node(x, y) for x, y in zip(a.body, b.body, strict=True))):
        return None
    if not (
        len(a.orelse) == len(b.orelse)
        and all(same_node(x, y) for x, y in zip(a.orelse, b.orelse, strict=True))
    ):
        return None
    if _negation(a.test, b.test):
        return ast.unparse(a.test)
    if _negation(b.test, a.test):
        return ast.unparse(b.test)
    return None


def inverted_flags(mine: ast.AST, theirs: ast.AST) -> Iterator[tuple[ast.If, str]]:
    """``if`` statements of a copy that test a flag the other way round around the very body upstream runs
    under it (``if flag: B`` copied as ``if not flag: B``), wherever they sit in the two functions."""
    ups = nodes_of(theirs, ast.If)
    if not ups:
        return
    # a pair tests a flag and its negation: only `if not x` on one side can pair (their bodies are compared,
    # by ``ast.dump`` as before, only for such pairs)
    up_not = [up for up in ups if _is_not(up.test)]  # type: ignore[attr-defined]
    keys: dict[int, str] = {}

    def body_key(node: ast.If) -> str:
        key = keys.get(id(node))
        if key is None:
            key = keys[id(node)] = ast.dump(ast.Module(body=node.body, type_ignores=[]))
        return key

    for node in nodes_of(mine, ast.If):
        assert isinstance(node, ast.If)
        negated = _is_not(node.test)
        for up in ups if negated else up_not:
            assert isinstance(up, ast.If)
            if not (_negation(up.test, node.test) or _negation(node.test, up.test)):
                continue
            if body_key(up) != body_key(node):
                continue
            flag = _inverted_flag([up], [node])
            if flag is not None:
                yield node, flag
                break


def _is_not(test: ast.expr) -> bool:
    return isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)


def added_offset(mine: ast.AST, theirs: ast.AST) -> ast.AST | None:
    """A ``1 + weight`` the copy computes where upstream's function never offsets a weight (a standard norm's
    weight handed to its kernel as ``1 + self.weight``)."""
    if not any(
        isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add) and _offset_add(n) for n in walk(theirs)
    ):
        return next(
            (
                n
                for n in walk(mine)
                if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add) and _offset_add(n)
            ),
            None,
        )
    return None


# ``ast.dump`` of the statements NPU458 aligns, by statement (held, so an id is never reused while kept): an
# upstream method is aligned with its copy in the GPU and the NPU generated file and with a spec's replacement
_STMT_KEYS: Bounded[int, tuple[ast.stmt, str]] = Bounded(8192)


def _stmt_key(stmt: ast.stmt) -> str:
    """``ast.dump(stmt)``, once per statement while it is kept."""
    hit = _STMT_KEYS.get(id(stmt))
    if hit is not None and hit[0] is stmt:
        return hit[1]
    key = ast.dump(stmt)
    _STMT_KEYS[id(stmt)] = (stmt, key)
    return key


def _closest(cp: list[ast.stmt], up: list[ast.stmt]) -> ast.stmt:
    """The statement of a changed run most like upstream's (the edited one, not a guard the patch added)."""
    if len(cp) == 1 or not up:
        return cp[0]
    import difflib

    want = " ".join(ast.unparse(u) for u in up)
    return max(cp, key=lambda c: difflib.SequenceMatcher(None, want, ast.unparse(c)).ratio())


def copy_numeric_faults(
    mine: list[ast.stmt], theirs: list[ast.stmt], patched: bool
) -> Iterator[tuple[ast.AST, str, str]]:
    """``(site, kind, detail)`` where a copy of upstream statements (a generated module's method body) computes
    other numerics than upstream: the two bodies are aligned statement by statement, and each changed or deleted
    run of upstream statements is compared with what replaced it (`numeric_features`). Statements the copy
    only adds (a patch's kernel guard) are not judged. A compound statement changed inside is aligned again
    within its body."""
    import difflib

    a = [_stmt_key(s) for s in theirs]
    b = [_stmt_key(s) for s in mine]
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    opcodes = matcher.get_opcodes()
    if patched and 2 * sum(i2 - i1 for tag, i1, i2, _j1, _j2 in opcodes if tag == "equal") < len(a):
        return  # a patch rewrote the body (a kernel call in place of the eager code): not a copy any more
    for tag, i1, i2, j1, j2 in opcodes:
        if tag in ("equal", "insert"):
            continue
        up, cp = theirs[i1:i2], mine[j1:j2]
        if patched and (len(up) > 2 or len(cp) > 2):
            continue  # a patch's rewrite of a run of upstream's statements, not an edit of one
        if len(up) == len(cp) > 1:  # several statements edited in place: each against its own
            for u, c in zip(up, cp, strict=True):
                yield from copy_numeric_faults([c], [u], patched)
            continue
        if len(up) == 1 and len(cp) == 1 and type(up[0]) is type(cp[0]):
            inner_up, inner_cp = getattr(up[0], "body", None), getattr(cp[0], "body", None)
            if isinstance(inner_up, list) and isinstance(inner_cp, list) and not isinstance(up[0], _FUNCS):
                head_up = [f for f in ast.iter_fields(up[0]) if f[0] not in ("body", "orelse")]
                head_cp = [f for f in ast.iter_fields(cp[0]) if f[0] not in ("body", "orelse")]
                if all(
                    (isinstance(x, ast.AST) and same_node(x, y)) or x == y
                    for (_n, x), (_m, y) in zip(head_up, head_cp, strict=True)
                ):
                    yield from copy_numeric_faults(inner_cp, inner_up, patched)
                    yield from copy_numeric_faults(
                        getattr(cp[0], "orelse", []), getattr(up[0], "orelse", []), patched
                    )
                    continue
        fault = _feature_fault(up, cp)
        if fault is not None:
            site = _closest(cp, up) if cp else (mine[j1] if j1 < len(mine) else (mine[-1] if mine else None))
            if site is not None:
                yield site, fault[0], fault[1]


# Elementwise functions torch spells both ways (`torch.rsqrt(x)` and `x.rsqrt()`), the same kernel.
_UNARY_METHODS = frozenset(
    {"rsqrt", "sqrt", "exp", "log", "tanh", "sigmoid", "abs", "neg", "reciprocal", "square"}
)


class _Canon(ast.NodeTransformer):
    """Spellings of one computation made alike: ``x ** 2`` / ``x.pow(2)`` / ``torch.pow(x, 2)`` as
    ``x.square()``, ``torch.rsqrt(x)`` as ``x.rsqrt()``, ``x.size(d)`` as ``x.shape[d]``, a reduction's positional axis as ``dim=``, ``a op= b`` as ``a = a op b``."""

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.Pow) and isinstance(node.right, ast.Constant) and node.right.value == 2:
            return ast.Call(ast.Attribute(node.left, "square", ast.Load()), [], [])
        if isinstance(node.op, ast.Mult) and same_node(node.left, node.right):
            return ast.Call(ast.Attribute(node.left, "square", ast.Load()), [], [])
        if (
            isinstance(node.op, ast.Add | ast.Mult)
            and not (
                isinstance(node.op, ast.Add) and (_sequence_like(node.left) or _sequence_like(node.right))
            )
            and ast.dump(node.right) < ast.dump(node.left)
        ):
            node.left, node.right = node.right, node.left  # a + b == b + a, exactly, in floating point too
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST:
        self.generic_visit(node)
        if node.value is not None and node.simple:
            return ast.Assign([node.target], node.value, lineno=node.lineno)
        return node

    def visit_IfExp(self, node: ast.IfExp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.test, ast.UnaryOp) and isinstance(node.test.op, ast.Not):
            # ``a if not c else b``: ``b if c else a``
            return ast.IfExp(node.test.operand, node.orelse, node.body)
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        func = node.func
        if not isinstance(func, ast.Attribute):
            node.keywords = sorted(node.keywords, key=lambda k: k.arg or "")  # keywords in any order
            return node
        two = lambda n: isinstance(n, ast.Constant) and n.value == 2  # noqa: E731
        fp32 = [*node.args, *(k.value for k in node.keywords if k.arg == "dtype")]
        if (
            func.attr == "to"
            and len(fp32) == 1
            and len(node.args) + len(node.keywords) == 1
            and _is_fp32(fp32[0])
        ):
            return ast.Call(ast.Attribute(func.value, "float", ast.Load()), [], [])
        if func.attr == "size" and not node.keywords and len(node.args) <= 1:
            shape = ast.Attribute(func.value, "shape", ast.Load())  # ``x.size()`` is ``x.shape``
            return ast.Subscript(shape, node.args[0], ast.Load()) if node.args else shape
        if func.attr == "reshape":
            func.attr = "view"
        if func.attr == "constant_" and len(node.args) == 2 and isinstance(node.args[1], ast.Constant):
            fill = {0: "zeros_", 1: "ones_"}.get(node.args[1].value)  # type: ignore[call-overload]
            if fill is not None and not isinstance(node.args[1].value, bool):
                return ast.Call(ast.Attribute(func.value, fill, ast.Load()), node.args[:1], [])
        if func.attr == "transpose" and len(node.args) == 2 and not node.keywords:
            node.args = sorted(node.args, key=ast.dump)
        if func.attr == "pow" and len(node.args) == 1 and two(node.args[0]) and not node.keywords:
            return ast.Call(ast.Attribute(func.value, "square", ast.Load()), [], [])
        if isinstance(func.value, ast.Name) and func.value.id == "torch":
            if func.attr == "pow" and len(node.args) == 2 and two(node.args[1]):
                return ast.Call(ast.Attribute(node.args[0], "square", ast.Load()), [], [])
            if func.attr == "square" and len(node.args) == 1:
                return ast.Call(ast.Attribute(node.args[0], "square", ast.Load()), [], [])
            if (
                func.attr in _UNARY_METHODS and len(node.args) == 1 and not node.keywords
            ):  # torch.rsqrt(x): x.rsqrt()
                return ast.Call(ast.Attribute(node.args[0], func.attr, ast.Load()), [], [])
            if (
                func.attr in _COPY_REDUCERS and func.attr != "norm" and node.args
            ):  # torch.mean(x, d): x.mean(d)
                func = ast.Attribute(node.args[0], func.attr, ast.Load())
                node = ast.Call(func, node.args[1:], node.keywords)
        if (
            func.attr in _COPY_REDUCERS
            and node.args
            and not any(k.arg in ("dim", "axis") for k in node.keywords)
        ):
            functional = isinstance(func.value, ast.Name) and func.value.id in ("torch", "F", "functional")
            index = 1 if functional else 0
            if len(node.args) == index + 1:
                node.keywords = [ast.keyword("dim", node.args[index]), *node.keywords]
                node.args = node.args[:index]
        node.keywords = sorted(node.keywords, key=lambda k: k.arg or "")
        for kw in node.keywords:
            if kw.arg == "axis":
                kw.arg = "dim"
        return node

    def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
        self.generic_visit(node)
        load = copy_tree(node.target)  # the target read: the same nodes in Load context (no re-parse)
        for sub in _walk(load):
            if isinstance(sub, (ast.Name, ast.Attribute, ast.Subscript, ast.Starred, ast.List, ast.Tuple)):
                sub.ctx = ast.Load()
        return ast.Assign([node.target], ast.BinOp(load, node.op, node.value), lineno=node.lineno)


def _canon_key(stmt: ast.stmt) -> str:
    return ast.dump(_Canon().visit(copy_tree(stmt)))


def _short(node: ast.AST) -> str:
    text = " ".join(ast.unparse(node).split())
    return text if len(text) <= 90 else text[:87] + "..."


def _code(stmts: list[ast.stmt]) -> list[ast.stmt]:
    """The statements that compute: docstrings and bare string constants (comments in string form) dropped,
    and moves of a name to another device (`x = x.to(y.device)`), which compute nothing."""
    return [
        s
        for s in stmts
        if not (
            isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant) and isinstance(s.value.value, str)
        )
        and not isinstance(s, ast.Pass)
        and not device_move(s)
    ]


def copy_differences(
    mine: list[ast.stmt], theirs: list[ast.stmt], keys: Keys | None = None
) -> Iterator[tuple[ast.AST, str, str]]:
    """``(site, upstream, copy)`` for each run of statements an unpatched copy of upstream code (a generated
    module's method no patch names) computes differently from upstream, equivalent spellings aside (`_Canon`):
    such a copy is upstream's code, statement for statement, so every other change is an edit nobody reviewed.
    A compound statement whose header is kept is aligned again inside; an inserted statement is reported
    as added. With ``keys`` (`copyequiv.Keys` of the two functions) a temporary the copy introduces is written out
    at its uses, and the rewrites that keep what upstream computes only given the function around them are made
    alike too."""
    import difflib

    theirs, mine = _code(theirs), _code(mine)
    if keys is not None:
        theirs = [s for s in theirs if not keys.drop_theirs(s)]
        mine = [s for s in mine if not keys.drop_mine(s)]
        a = [keys.theirs(s) for s in theirs]
        b = [keys.mine(s) for s in mine]
    else:
        a = [_canon_key(s) for s in theirs]
        b = [_canon_key(s) for s in mine]
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        up, cp = theirs[i1:i2], mine[j1:j2]
        if len(up) == len(cp) == 1 and type(up[0]) is type(cp[0]) and not isinstance(up[0], _FUNCS):
            inner_up, inner_cp = getattr(up[0], "body", None), getattr(cp[0], "body", None)
            if isinstance(inner_up, list) and isinstance(inner_cp, list):
                head_up = [
                    f
                    for f in ast.iter_fields(up[0])
                    if f[0] not in ("body", "orelse", "handlers", "finalbody")
                ]
                head_cp = [
                    f
                    for f in ast.iter_fields(cp[0])
                    if f[0] not in ("body", "orelse", "handlers", "finalbody")
                ]
                handlers_up = getattr(up[0], "handlers", [])
                handlers_cp = getattr(cp[0], "handlers", [])
                if (
                    all(
                        (isinstance(x, ast.AST) and _canon_key_expr(x) == _canon_key_expr(y)) or x == y
                        for (_n, x), (_m, y) in zip(head_up, head_cp, strict=True)
                    )
                    and len(handlers_up) == len(handlers_cp)
                    and all(
                        hu.name == hc.name
                        and (hu.type is None) == (hc.type is None)
                        and (hu.type is None or _canon_key_expr(hu.type) == _canon_key_expr(hc.type))
                        for hu, hc in zip(handlers_up, handlers_cp, strict=True)
                    )
                ):
                    yield from copy_differences(inner_cp, inner_up, keys)
                    yield from copy_differences(
                        getattr(cp[0], "orelse", []), getattr(up[0], "orelse", []), keys
                    )
                    for hu, hc in zip(handlers_up, handlers_cp, strict=True):
                        yield from copy_differences(hc.body, hu.body, keys)
                    yield from copy_differences(
                        getattr(cp[0], "finalbody", []), getattr(up[0], "finalbody", []), keys
                    )
                    continue
        site = cp[0] if cp else (mine[j1] if j1 < len(mine) else (mine[-1] if mine else None))
        if site is None:
            continue
        if len(up) == len(cp) == 1 and _offset_key(up[0]) == _offset_key(cp[0]):
            continue  # ``x * (1 + w)`` written ``x + x * w``: the same offset (Gemma's RMSNorm)
        was = "; ".join(_short(u) for u in up) or "(nothing)"
        now = "; ".join(_short(c) for c in cp) or "(deleted)"
        if was == now and len(up) == len(cp) == 1:  # the edit lies past the shortened text: name its part
            part_up, part_cp = _differing_part(up[0], cp[0])
            was, now = f"... {_short(part_up)} ...", f"... {_short(part_cp)} ..."
        yield site, was, now


def _differing_part(a: ast.AST, b: ast.AST) -> tuple[ast.AST, ast.AST]:
    """The innermost sub-expressions where two statements differ (descending while one child alone differs),
    in their canonical spelling (keywords sorted)."""
    a, b = _Canon().visit(copy_tree(a)), _Canon().visit(copy_tree(b))
    while type(a) is type(b):
        pairs: list[tuple[ast.AST, ast.AST]] = []
        for (_n, x), (_m, y) in zip(ast.iter_fields(a), ast.iter_fields(b), strict=True):
            if isinstance(x, list) and isinstance(y, list):
                if len(x) != len(y):
                    return a, b
                pairs += [
                    (u, v) for u, v in zip(x, y, strict=True) if _canon_key_expr(u) != _canon_key_expr(v)
                ]
            elif isinstance(x, ast.AST) and isinstance(y, ast.AST):
                if _canon_key_expr(x) != _canon_key_expr(y):
                    pairs.append((x, y))
            elif x != y and not isinstance(x, ast.expr_context):
                return a, b
        if len(pairs) != 1 or not all(isinstance(n, ast.AST) for n in pairs[0]):
            return a, b
        a, b = pairs[0]
    return a, b


def _sequence_like(node: ast.AST) -> bool:
    """An operand whose ``+`` concatenates (a tuple, list or string, or a slice of something): not commutative."""
    if isinstance(node, ast.Tuple | ast.List | ast.ListComp | ast.JoinedStr):
        return True
    if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes):
        return True
    return isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice)


def _canon_key_expr(node: ast.AST) -> str:
    if isinstance(node, ast.expr):
        return ast.dump(_Canon().visit(ast.Expression(copy_tree(node))))
    return ast.dump(node) if isinstance(node, ast.AST) else repr(node)


_NORM_ATTR = re.compile(r"norm", re.I)


def _self_norm_uses(func: ast.AST) -> tuple[Counter[str], set[str], dict[str, list[ast.Call]]]:
    """Calls of ``self.<x>norm(...)`` (counted), every ``self.<x>norm`` mentioned, and the call sites of each."""
    calls: Counter[str] = Counter()
    mentioned: set[str] = set()
    sites: dict[str, list[ast.Call]] = {}
    for node in nodes_of(func, ast.Attribute, ast.Call):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
            and _NORM_ATTR.search(node.attr)
        ):
            mentioned.add(node.attr)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "self"
            and _NORM_ATTR.search(node.func.attr)
        ):
            calls[node.func.attr] += 1
            sites.setdefault(node.func.attr, []).append(node)
    return calls, mentioned, sites


def rewritten_copy_faults(mine: ast.AST, theirs: ast.AST) -> Iterator[tuple[ast.AST, str, str]]:
    """Faults a patch's rewrite of an upstream method shows against the whole upstream method, however much of
    it the patch rewrote: a norm submodule upstream calls that the patch never touches while it calls another
    one more often than upstream (``key_states = self.q_norm(key_states)``), and a loss coefficient that
    scales other terms than upstream's (``coef * (loss + aux)`` for ``loss + coef * aux``)."""
    import difflib

    up_calls, _up_mentioned, up_sites = _self_norm_uses(theirs)
    cp_calls, cp_mentioned, cp_sites = _self_norm_uses(mine)
    for lost in up_calls:
        if lost in cp_mentioned:
            continue
        for extra, count in cp_calls.items():
            if extra != lost and count > up_calls.get(extra, 0) and extra in up_calls:
                # the call of the other norm that stands where upstream's call was: the most alike arguments
                want = ", ".join(ast.unparse(a) for a in up_sites[lost][0].args)
                site = max(
                    cp_sites[extra],
                    key=lambda c: difflib.SequenceMatcher(
                        None, want, ", ".join(ast.unparse(a) for a in c.args)
                    ).ratio(),
                )
                yield site, "norm", f"`self.{extra}` called where upstream calls `self.{lost}`"
                break
    up_scale: dict[str, set[int]] = {}
    for node in walk(theirs):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            found = coefficient_scope(node)
            if found is not None:
                up_scale.setdefault(found[0], set()).add(found[1])
    for node in walk(mine):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            found = coefficient_scope(node)
            if found is not None and found[0] in up_scale and found[1] not in up_scale[found[0]]:
                terms = ", ".join(str(n) for n in sorted(up_scale[found[0]]))
                yield node, "scale", f"upstream's `{found[0]}` multiplies {terms} term(s), here {found[1]}"


def feature_message(kind: str) -> str:
    return _FEATURE_TEXT[kind]


# ---------------------------------------------------------------------------------------------------------------
# Forwarded arguments: a wrapper hands its own parameters on to the function it wraps in that function's order


def _positional_params(func: ast.AST) -> list[str]:
    args = func.args  # type: ignore[attr-defined]
    return [a.arg for a in [*args.posonlyargs, *args.args]]


def _top_function(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    for stmt in tree.body:
        if isinstance(stmt, _FUNCS) and stmt.name == name:
            return stmt  # type: ignore[return-value]
    return None


def _imported_function(module: str, name: str, anchor: str) -> ast.FunctionDef | None:
    from npu_lint.veomni.patchgen import load_file, path_of_module
    from npu_lint.veomni.upstream import upstream_path

    if module.startswith("transformers."):
        found = upstream_path(module)
        path = str(found) if found is not None else None
    else:
        path = path_of_module(module, anchor)
    parsed = load_file(path) if path else None
    if parsed is None or parsed.tree is None:
        return None
    return _top_function(parsed.tree, name)


def _callee_bindings(tree: ast.Module, path: str) -> dict[str, tuple[str, str] | ast.FunctionDef]:
    """Module-level names bound to a function: its def, or (module, name) of an import from a ``veomni`` /
    ``transformers`` module; ``x = y`` aliases follow ``y``."""
    from npu_lint.veomni.patchgen import module_of

    here = module_of(path) or ""
    package = here.split(".") if path.endswith("__init__.py") else here.split(".")[:-1]
    out: dict[str, tuple[str, str] | ast.FunctionDef] = {}
    for stmt in tree.body:
        if isinstance(stmt, _FUNCS):
            out[stmt.name] = stmt  # type: ignore[assignment]
        elif isinstance(stmt, ast.ImportFrom):
            if stmt.level:
                if not here:
                    continue
                base = package[: len(package) - stmt.level + 1]
                source = ".".join([*base, *([stmt.module] if stmt.module else [])])
            else:
                source = stmt.module or ""
            if source.startswith(("veomni.", "transformers.")):
                for alias in stmt.names:
                    out[alias.asname or alias.name] = (source, alias.name)
        elif (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, ast.Name)
            and stmt.value.id in out
        ):
            out[stmt.targets[0].id] = out[stmt.value.id]
    return out


def swapped_arguments(tree: ast.Module, path: str) -> Iterator[tuple[ast.Call, str, str, str]]:
    """``(call, callee, argument, parameter)``: a function hands two of its own parameters on positionally to a
    module-level or imported function whose signature names them in the other order (``f(a, b, y, x)`` to
    ``def f(a, b, x, y)``): each lands in the other's place (a token count read as the ignore index, ``top_k``
    as the number of experts)."""
    bindings: dict[str, tuple[str, str] | ast.FunctionDef] | None = None
    for func in nodes_of(tree, ast.FunctionDef, ast.AsyncFunctionDef):
        params = set(_positional_params(func)) | {a.arg for a in func.args.kwonlyargs}  # type: ignore[attr-defined]
        if len(params) < 3:
            continue
        for call in nodes_of(func, ast.Call):
            assert isinstance(call, ast.Call)
            if not isinstance(call.func, ast.Name) or len(call.args) < 2:
                continue
            names = [a.id if isinstance(a, ast.Name) and a.id in params else None for a in call.args]
            if sum(n is not None for n in names) < 2:
                continue
            if bindings is None:
                bindings = _callee_bindings(tree, path)
            bound = bindings.get(call.func.id)
            if bound is None:
                continue
            target = bound if isinstance(bound, ast.FunctionDef) else _imported_function(*bound, path)
            if target is None or target is func:
                continue
            callee = _positional_params(target)
            if callee and callee[0] in ("self", "cls"):
                continue
            given = {n for n in names if n}
            for i, name in enumerate(names):
                if name is None or i >= len(callee) or callee[i] == name or name not in callee:
                    continue
                if callee[i] in given and names[callee.index(name)] == callee[i]:
                    yield call, call.func.id, name, callee[i]
                    break


# ---------------------------------------------------------------------------------------------------------------
# Top-k routing weights: renormalised over the k experts each token selected


def _topk_dim(call: ast.Call) -> str:
    for kw in call.keywords:
        if kw.arg == "dim":
            return ast.unparse(kw.value)
    functional = isinstance(call.func, ast.Attribute) and _leaf_name(call.func.value) == "torch"
    index = 2 if functional else 1
    return ast.unparse(call.args[index]) if len(call.args) > index else "-1"


def _sum_dim(call: ast.AST, name: str) -> str | None:
    """The axis of ``name.sum(...)`` / ``torch.sum(name, ...)`` ("all" without one); None for another node."""
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "sum"):
        return None
    receiver = call.func.value
    args = list(call.args)
    if isinstance(receiver, ast.Name) and receiver.id == name:
        pass
    elif _leaf_name(receiver) == "torch" and args and isinstance(args[0], ast.Name) and args[0].id == name:
        args = args[1:]
    else:
        return None
    for kw in call.keywords:
        if kw.arg == "dim":
            return ast.unparse(kw.value)
    return ast.unparse(args[0]) if args else "all"


def topk_renorm_axis_faults(func: ast.AST) -> Iterator[tuple[ast.AST, str, str, str]]:
    """``(site, name, topk axis, sum axis)``: top-k values (``vals, idx = torch.topk(probs, k, dim=-1)``)
    divided by their own sum over another axis than the one top-k selected along (``vals /= vals.sum(dim=0)``:
    over the tokens of the batch, not each token's k experts), or over every element."""
    picked: dict[str, str] = {}
    for stmt in nodes_of(func, ast.Assign):
        assert isinstance(stmt, ast.Assign)
        value = stmt.value
        while isinstance(value, ast.Subscript):  # torch.topk(...)[0]
            value = value.value
        if not (
            isinstance(value, ast.Call)
            and isinstance(value.func, ast.Attribute)
            and value.func.attr == "topk"
        ):
            continue
        target = stmt.targets[0]
        if isinstance(target, ast.Tuple) and target.elts and isinstance(target.elts[0], ast.Name):
            picked[target.elts[0].id] = _topk_dim(value)
        elif isinstance(target, ast.Name) and isinstance(stmt.value, ast.Subscript):
            picked[target.id] = _topk_dim(value)
    if not picked:
        return
    for node in nodes_of(func, ast.AugAssign, ast.BinOp):
        if (
            isinstance(node, ast.AugAssign)
            and isinstance(node.op, ast.Div)
            and isinstance(node.target, ast.Name)
        ):
            name, divisor = node.target.id, node.value
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.left, ast.Name):
            name, divisor = node.left.id, node.right
        else:
            continue
        if name not in picked:
            continue
        axis = _sum_dim(divisor, name)
        if axis is None or axis == picked[name]:
            continue
        if {axis, picked[name]} <= {"-1", "1"}:  # (tokens, k) values: the last axis either way
            continue
        yield node, name, picked[name], axis


# ---------------------------------------------------------------------------------------------------------------
# Per-position outputs of a chunked loss: masked alike


def _masked_by(value: ast.AST) -> str | None:
    """The mask a per-position value is gated by: ``torch.where(mask, v, zero)`` / ``v * mask`` /
    ``v.masked_fill(~mask, 0)``; None when ungated."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute):
        if value.func.attr == "where" and len(value.args) == 3:
            return ast.unparse(value.args[0])
        if value.func.attr == "masked_fill" and value.args:
            return ast.unparse(strip_not(value.args[0]))
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Mult):
        for side in (value.left, value.right):
            text = ast.unparse(side)
            if "mask" in text.lower():
                return text
    return None


def strip_not(node: ast.AST) -> ast.AST:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Invert, ast.Not)):
        return node.operand
    return node


def unmasked_sibling_stores(func: ast.AST) -> Iterator[tuple[ast.Assign, str, str]]:
    """``(store, buffer, mask)``: in one block that writes several per-position buffers over the same slice
    (``out[start:end] = ...``), all but one gated by the same mask (``torch.where(mask, v, 0)``), the one
    written ungated from a plain local value: its ignored positions (prompt, padding) count in the loss."""
    for block_owner in nodes_of(func, ast.For, ast.While):
        stores: list[tuple[ast.Assign, str, str, str | None]] = []
        for stmt in block_owner.body:  # type: ignore[attr-defined]
            if (
                isinstance(stmt, ast.Assign)
                and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Subscript)
                and isinstance(stmt.targets[0].slice, ast.Slice)
                and isinstance(stmt.targets[0].value, ast.Name)
            ):
                target = stmt.targets[0]
                stores.append((stmt, target.value.id, ast.unparse(target.slice), _masked_by(stmt.value)))
        if len(stores) < 3:
            continue
        masks: dict[tuple[str, str], int] = {}
        for _s, _b, where, mask in stores:
            if mask is not None:
                masks[where, mask] = masks.get((where, mask), 0) + 1
        for stmt, buffer, where, mask in stores:
            if mask is not None:
                continue
            gate = next((m for (w, m), count in masks.items() if w == where and count >= 2), None)
            if gate is None:
                continue
            value = stmt.value
            if any(isinstance(n, ast.Call) for n in walk(value)):
                continue  # a helper that takes the labels masks on its own
            yield stmt, buffer, gate


# ---------------------------------------------------------------------------------------------------------------
# A step's loss: the sum of its named terms


def _loss_terms(node: ast.AST) -> str | None:
    """The loss mapping whose values ``node`` collects (``list(loss_dict.values())``, ``loss_dict.values()``,
    ``[v for v in loss_dict.values()]``); None otherwise."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("list", "tuple"):
        node = node.args[0] if node.args else node
    if isinstance(node, (ast.ListComp, ast.GeneratorExp)) and len(node.generators) == 1:
        node = node.generators[0].iter
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "values"
        and "loss" in (_leaf_name(node.func.value) or "").lower()
    ):
        return _leaf_name(node.func.value)
    return None


def averaged_loss_terms(func: ast.AST) -> Iterator[tuple[ast.Call, str]]:
    """``(mean call, mapping)``: the named terms of a loss mapping stacked and averaged
    (``torch.stack(list(loss_dict.values())).mean()``) where the objective is their sum."""
    for call in nodes_of(func, ast.Call):
        assert isinstance(call, ast.Call)
        f = call.func
        if not (isinstance(f, ast.Attribute) and f.attr == "mean"):
            continue
        inner = f.value if not (_leaf_name(f.value) == "torch" and call.args) else call.args[0]
        if not (
            isinstance(inner, ast.Call)
            and isinstance(inner.func, ast.Attribute)
            and inner.func.attr in ("stack", "tensor", "cat")
            and inner.args
        ):
            continue
        mapping = _loss_terms(inner.args[0])
        if mapping is not None:
            yield call, mapping


# ---------------------------------------------------------------------------------------------------------------
# A loss kernel row built once at module level


def summed_loss_objects(tree: ast.Module) -> Iterator[tuple[ast.Call, str, ast.AST]]:
    """``(return value, object, reduction keyword value)``: a loss object built at module level with
    ``reduction="sum"`` (``ce = FusedLinearCrossEntropyLoss(reduction="sum")``) whose result a function with a
    ``num_items_in_batch`` parameter returns without dividing it: a kernel row that hands the trainer a token
    sum where its sibling rows hand on the per-token mean."""
    objects: dict[str, ast.AST] = {}
    for stmt in tree.body:
        if not (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, ast.Call)
        ):
            continue
        callee = _callee(stmt.value)
        if not _LOSS_CALLEE.search(callee) and not callee.lower().endswith("loss"):
            continue
        for kw in stmt.value.keywords:
            if kw.arg == "reduction" and isinstance(kw.value, ast.Constant) and kw.value.value == "sum":
                objects[stmt.targets[0].id] = kw.value
    if not objects:
        return
    for func in tree.body:
        if not isinstance(func, _FUNCS):
            continue
        params = {a.arg for a in [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]}
        if "num_items_in_batch" not in params:
            continue
        for ret in nodes_of(func, ast.Return):
            value = ret.value  # type: ignore[attr-defined]
            parts = value.elts if isinstance(value, ast.Tuple) else [value]
            for part in parts:
                if isinstance(part, ast.Call) and isinstance(part.func, ast.Name) and part.func.id in objects:
                    yield part, part.func.id, objects[part.func.id]


# ---------------------------------------------------------------------------------------------------------------
# Sibling calls: two calls of one function in a module (two wrappers of a kernel, two branches of a dispatch)
# hand it the same contract; the one that forwards a value is the reference for the one that does not.


def _bound_before(func: ast.AST, call: ast.Call) -> set[str]:
    """Names bound where ``call`` can see them: the function's parameters, and names a statement before the call
    assigns in the call's own block or one enclosing it (not in a sibling branch that returned)."""
    args = func.args  # type: ignore[attr-defined]
    names = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}

    def visit(block: list[ast.stmt]) -> bool:
        for stmt in block:
            if stmt.lineno > call.lineno:
                return True
            inside = stmt.lineno <= call.lineno <= (stmt.end_lineno or stmt.lineno)
            if inside and not isinstance(stmt, _FUNCS):
                for field in ("body", "orelse", "handlers", "finalbody"):
                    for sub in getattr(stmt, field, None) or []:
                        if isinstance(sub, ast.ExceptHandler):
                            if visit(sub.body):
                                return True
                    inner = getattr(stmt, field, None) or []
                    if inner and not isinstance(inner[0], ast.ExceptHandler):
                        if inner[0].lineno <= call.lineno <= (inner[-1].end_lineno or inner[-1].lineno):
                            return visit(inner)
                return True
            if not isinstance(stmt, (*_FUNCS, ast.ClassDef)) and not inside:
                if isinstance(stmt, ast.If | ast.For | ast.While | ast.Try | ast.With):
                    heads = [
                        getattr(stmt, "target", None),
                        *(i.optional_vars for i in getattr(stmt, "items", [])),
                    ]
                    for head in heads:
                        if head is not None:
                            names.update(n.id for n in walk(head) if isinstance(n, ast.Name))
                    continue  # a name bound only inside a finished branch may not reach the call
                for node in walk(stmt):
                    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                        names.add(node.id)
        return True

    visit(func.body)  # type: ignore[attr-defined]
    return names


def _mentions(node: ast.AST, name: str) -> bool:
    for sub in walk(node):
        if (
            (isinstance(sub, ast.Name) and sub.id == name)
            or (isinstance(sub, ast.Attribute) and sub.attr == name)
            or (isinstance(sub, ast.Constant) and sub.value == name)
        ):
            return True
    return False


def _slots(call: ast.Call) -> dict[str, ast.expr]:
    out: dict[str, ast.expr] = {}
    for i, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            break
        out[f"#{i}"] = arg
    for kw in call.keywords:
        if kw.arg is not None:
            out[kw.arg] = kw.value
    return out


def _slot_text(slot: str) -> str:
    return f"argument {int(slot[1:]) + 1}" if slot.startswith("#") else f"`{slot}=`"


# A function of the loss path (a loss, a log-prob / entropy / distillation kernel), not a class constructor.
_LOSS_KERNEL = re.compile(r"loss|log_?probs?|entropy|distill|kl_?div", re.I)


def _read_in(func: ast.AST, name: str) -> bool:
    """Whether ``func`` uses the local ``name`` itself (``logits / temperature``): a value the caller applies is
    not dropped. Handing it on to another call under its own name (``temperature=temperature``) is no use."""
    handed = {
        id(k.value)
        for c in nodes_of(func, ast.Call)
        for k in c.keywords  # type: ignore[attr-defined]
        if k.arg == name
    }
    return any(
        n.id == name and isinstance(n.ctx, ast.Load) and id(n) not in handed  # type: ignore[attr-defined]
        for n in nodes_of(func, ast.Name)
    )


def sibling_call_faults(tree: ast.Module) -> Iterator[tuple[ast.AST, ast.Call, str]]:
    """``(site, call, detail)`` for a call of a loss-path function (called by its bare name) that hands it
    less, or something else, than another call of the same function in the module does:

    * a keyword the sibling forwards from a same-named local (``temperature=temperature``) left out, while the
      caller has that name bound too (popped from its kwargs, a parameter): the value is dropped on this path;
    * one local passed for two parameters, one of them a keyword whose own value the sibling passes
      (``shift_labels=labels`` beside ``labels``, where the sibling passes ``shift_labels=shift_labels``).
    """
    named: Counter[str] = Counter(
        n.func.id  # type: ignore[attr-defined]
        for n in nodes_of(tree, ast.Call)
        if isinstance(n.func, ast.Name) and _LOSS_KERNEL.search(n.func.id)  # type: ignore[attr-defined]
    )
    if not any(count > 1 for count in named.values()):
        return  # no loss kernel called twice: nothing to compare (most files stop here)
    funcs = [n for n in nodes_of(tree, ast.FunctionDef, ast.AsyncFunctionDef)]
    calls: dict[str, list[tuple[ast.Call, ast.AST]]] = {}
    owner: dict[int, ast.AST] = {}
    for func in funcs:
        for node in nodes_of(func, ast.Call):
            owner[id(node)] = func  # outer functions come first: the innermost one wins
    for node in nodes_of(tree, ast.Call):
        call = node
        if isinstance(call.func, ast.Name) and id(call) in owner:  # type: ignore[attr-defined]
            calls.setdefault(call.func.id, []).append((call, owner[id(call)]))  # type: ignore[attr-defined]
    bound_memo: dict[int, set[str]] = {}
    for callee, sites in calls.items():
        if len(sites) < 2 or not _LOSS_KERNEL.search(callee) or callee[:1].isupper():
            continue
        for call, func in sites:
            if any(kw.arg is None for kw in call.keywords) or any(
                isinstance(a, ast.Starred) for a in call.args
            ):
                continue
            mine = _slots(call)
            found = None
            site: ast.AST = call
            for other, other_func in sites:
                if other is call or other_func is func:
                    continue
                theirs = _slots(other)
                bound = bound_memo.get(id(call))
                if bound is None:
                    bound = bound_memo[id(call)] = _bound_before(func, call)
                for kw in other.keywords:
                    if (
                        kw.arg is not None
                        and isinstance(kw.value, ast.Name)
                        and kw.value.id == kw.arg
                        and kw.arg not in mine
                        and len(call.args) <= len(other.args)
                        and kw.arg in bound
                        and not any(_mentions(v, kw.arg) for v in mine.values())
                        and not _read_in(
                            func, kw.arg
                        )  # the caller applies it itself (`logits / temperature`)
                        and not any(  # the caller passes it to this function elsewhere: a deliberate choice here
                            f is func and any(k.arg == kw.arg for k in c.keywords) for c, f in sites
                        )
                    ):
                        args = [*call.args, *(k.value for k in call.keywords)]
                        site = (
                            max(args, key=lambda a: (a.end_lineno or 0, a.end_col_offset or 0))
                            if args
                            else call
                        )
                        found = (
                            f"`{kw.arg}` is bound here but not handed on, while the call at line {other.lineno} "
                            f"passes `{kw.arg}={kw.arg}`"
                        )
                        break
                if found is None:
                    for slot, value in mine.items():
                        if slot.startswith("#") or not isinstance(value, ast.Name) or value.id == slot:
                            continue
                        twin = next(
                            (
                                s
                                for s, v in mine.items()
                                if s != slot and isinstance(v, ast.Name) and v.id == value.id
                            ),
                            None,
                        )
                        if twin is None or slot not in theirs or twin not in theirs:
                            continue
                        if _mentions(theirs[slot], slot) and not same_node(theirs[slot], theirs[twin]):
                            site = value
                            found = (
                                f"`{value.id}` is passed both as {_slot_text(twin)} and as `{slot}=`, while the call "
                                f"at line {other.lineno} passes `{slot}={ast.unparse(theirs[slot])}`"
                            )
                            break
                if found is not None:
                    yield site, call, found
                    break


# ---------------------------------------------------------------------------------------------------------------
# KL direction: sum_k p_k (log p_k - log q_k) is weighted by the distribution whose log-probability it subtracts
# *from*; a term weighted by exp(a) that subtracts a (``a.exp() * (b - a)``) is the negated divergence.

_CASTS = frozenset({"float", "to", "detach", "contiguous", "type", "bfloat16", "half", "double", "clone"})


def _strip_casts(node: ast.AST) -> ast.AST:
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _CASTS:
        node = node.func.value
    return node


def _exp_argument(node: ast.AST) -> ast.AST | None:
    node = _strip_casts(node)
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "exp" and not node.args:
            return func.value
        name = call_name(node)
        if name == "exp" and len(node.args) == 1:
            return node.args[0]
    return None


def _is_sub(node: ast.AST) -> bool:
    return isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub)


def kl_direction_faults(func: ast.AST) -> Iterator[tuple[ast.AST, str]]:
    """``(difference, detail)`` for a KL-style term ``exp(a) * (b - a)`` (``a`` and ``b`` log-probabilities, the
    weight the exponential of the subtrahend): the negated divergence, where ``exp(a) * (a - b)`` is meant.
    Locals bound once to ``a.exp()`` are followed; a term negated within its statement is left alone."""
    if not any(
        isinstance(n.op, ast.Mult)  # type: ignore[attr-defined]
        and (_is_sub(n.left) or _is_sub(n.right))  # type: ignore[attr-defined]
        for n in nodes_of(func, ast.BinOp)
    ):
        return  # a term is a product with a difference: a function without one holds none
    single: dict[str, ast.AST] = {}
    counts: Counter[str] = Counter()
    for name, value in _assignments(func):
        counts[name] += 1
        single[name] = value

    def weight_of(node: ast.AST) -> str | None:
        node = _strip_casts(node)
        if isinstance(node, ast.Name) and counts.get(node.id) == 1:
            node = single[node.id]
        arg = _exp_argument(node)
        return ast.unparse(_strip_casts(arg)) if arg is not None else None

    def log_of(node: ast.AST) -> str:
        return ast.unparse(_strip_casts(node))

    def negations(root: ast.AST) -> list[ast.AST]:
        """What ``root`` negates: ``-x``, ``x.neg()``, ``torch.neg(x)``, ``x * -1``."""
        out: list[ast.AST] = []
        for n in walk(root):
            if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
                out.append(n.operand)
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "neg":
                out.append(n.args[0] if n.args and ast.unparse(n.func.value) == "torch" else n.func.value)
            elif isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult):
                for x, y in ((n.left, n.right), (n.right, n.left)):
                    if int_value(y) == -1:
                        out.append(x)
        return out

    negated_names = {  # `loss = -kl`, `return -ratio.mean()` elsewhere
        n.id for root in negations(func) for n in walk(root) if isinstance(n, ast.Name)
    }
    for stmt in nodes_of(func, ast.Assign, ast.AugAssign, ast.Return, ast.Expr):
        if isinstance(stmt, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id in negated_names for t in stmt.targets
        ):
            continue  # the term is bound to a local that is negated where it is used
        negated = negations(stmt)
        for node in walk(stmt):
            if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)):
                continue
            for w, d in ((node.left, node.right), (node.right, node.left)):
                if not (isinstance(d, ast.BinOp) and isinstance(d.op, ast.Sub)):
                    continue
                a = weight_of(w)
                if a is None:
                    continue
                if log_of(d.right) == a and log_of(d.left) != a:
                    if any(node in walk(n) for n in negated):
                        continue
                    yield d, f"`{ast.unparse(w)}` weights `{ast.unparse(d)}`, which subtracts `{a}` itself"


# -- a step's global (all-rank) value taken from the rank's own ---------------------------------------------------

# Calls that keep a value on this rank: tensor methods and conversions, never a collective.
_RANK_LOCAL_CALLS = frozenset(
    {
        "item",
        "sum",
        "float",
        "int",
        "long",
        "clone",
        "detach",
        "to",
        "cpu",
        "tolist",
        "copy",
        "deepcopy",
        "dict",
        "items",
        "values",
        "keys",
    }
)
_GLOBAL_WORDS = ("global_", "_global", "total_", "world_")
_COUNT_WORDS = ("token", "count", "num_", "len", "items", "loss", "sample")


def _stem(name: str) -> str:
    low = name.lower()
    for word in _GLOBAL_WORDS:
        low = low.replace(word, "")
    return low.strip("_")


# Collectives a `global_*` value handed to after its assignment is reduced by (`dist.all_reduce(g)`).
_REDUCING_WORDS = ("reduce", "gather", "all_to_all", "broadcast")
# Operands of a test that asks whether the job runs on one process (`world_size == 1`, `ep_group is None`).
_GROUP_WORDS = re.compile(r"world|group|mesh|(?<![a-z])(?:ep|dp|sp|tp|fsdp)_(?:size|group|world)")


def _single_process_test(test: ast.AST) -> bool:
    """`world_size == 1`, `ep_size <= 1`, `dp_size < 2`, `ep_group is None` (any operand of an `or`): on that
    branch the rank's own value is the job's."""
    for node in walk(test):
        if not isinstance(node, ast.Compare) or len(node.ops) != 1:
            continue
        left, op, right = node.left, node.ops[0], node.comparators[0]
        named = _GROUP_WORDS.search(ast.unparse(left).lower()) is not None
        if not named:
            continue
        if isinstance(op, ast.Is) and isinstance(right, ast.Constant) and right.value is None:
            return True
        bound = int_value(right)
        if (isinstance(op, (ast.Eq, ast.LtE)) and bound == 1) or (isinstance(op, ast.Lt) and bound == 2):
            return True
    return False


def _single_process_assignments(func: ast.AST) -> set[int]:
    """ids of the statements under the true branch of a single-process test."""
    out: set[int] = set()
    for node in walk(func):
        if isinstance(node, ast.If) and _single_process_test(node.test):
            out |= {id(n) for s in node.body for n in walk(s)}
    return out


def _reduced_later(func: ast.AST, assign: ast.Assign, name: str) -> bool:
    """A statement after `assign` hands `name` to a collective (`dist.all_reduce(global_n, group=g)`)."""
    end = getattr(assign, "end_lineno", assign.lineno)
    for node in walk(func):
        if not isinstance(node, ast.Call) or node.lineno <= end:
            continue
        if not any(w in _callee(node).lower() for w in _REDUCING_WORDS):
            continue
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            spelled = last_name(arg)
            if spelled == name:
                return True
    return False


def unreduced_globals(func: ast.AST) -> Iterator[tuple[ast.Assign, str, str]]:
    """``(assignment, global name, local name)`` where a value named for the whole job (`global_*`, `*_global`)
    is assigned the rank's own value of the same quantity (`self.global_tokens = self.tokens`, `global_len =
    {k: v.item() for k, v in local_len.items()}`) with no call that could reduce it across ranks: every rank
    then divides its loss by its own count while the gradients are averaged over ranks. Only a value whose
    name without the global word equals the local one it is taken from counts (`global_micro_batches_token_len`
    from `micro_batches_token_len`). A value handed to a collective afterwards (`g = n.clone();
    dist.all_reduce(g)`) is reduced, and one taken under a single-process test (`if world_size == 1:`) needs
    no reduction."""
    single: set[int] | None = None
    for node in _walk(func):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target = node.targets[0]
        name = last_name(target)
        if name is None or not name.lower().startswith("global_") and "_global_" not in name.lower():
            continue
        stem = _stem(name)
        if not stem or not any(w in stem for w in _COUNT_WORDS):
            continue  # a global *representation* (`global_hidden_states`, pooled features) is not a job total
        local: str | None = None
        reduced = False
        for sub in _walk(node.value):
            if isinstance(sub, ast.Call):
                attr = call_name(sub)
                if attr not in _RANK_LOCAL_CALLS:
                    reduced = True
                    break
            spelled = last_name(sub)
            if spelled is not None and spelled.lower() == stem:
                local = spelled
        if reduced or local is None or _reduced_later(func, node, name):
            continue
        if single is None:
            single = _single_process_assignments(func)
        if id(node) not in single:
            yield node, name, local


# -- chunked loss kernels: accumulators and the backward's scaling ---------------------------------------------

_ZERO_INITS = frozenset({"zeros", "zeros_like", "new_zeros"})


def _zero_init(value: ast.AST) -> bool:
    """`torch.zeros(...)`, `torch.zeros_like(w)`, `x.new_zeros(...)`, `torch.tensor(0.0, ...)` (a tensor: a
    Python `0` is as often a running position as a sum)."""
    if isinstance(value, ast.Call):
        name = _callee(value)
        if name in _ZERO_INITS:
            return True
        if name == "tensor" and value.args:
            first = value.args[0]
            return (
                isinstance(first, ast.Constant)
                and first.value in (0, 0.0)
                and not isinstance(first.value, bool)
            )
    return False


def _first_iteration_test(test: ast.AST) -> bool:
    """`i == 0`, `step == 0`, `not i`, `is_first`, `first_chunk`: the branch seeds the accumulator."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
        return int_value(test.comparators[0]) == 0 or int_value(test.left) == 0
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return isinstance(test.operand, ast.Name)
    spelled = last_name(test) or ""
    return "first" in spelled.lower()


def overwritten_accumulators(func: ast.AST) -> Iterator[tuple[ast.AST, str]]:
    """``(site, name)`` where a value started at zero before a loop (`acc = torch.zeros_like(w)`, `total =
    torch.tensor(0.0)`) is, inside the loop, overwritten (`acc.copy_(x)`, `acc = x`), whether or not another
    path of the loop adds to it: after the loop it holds the last chunk's (or layer's) value, not the sum. A
    reset to zero (`total_loss = torch.tensor(0.0)` once a log interval is printed) and a seeding under a
    first-iteration test (`if i == 0: acc = x else: acc = acc + x`) are not overwrites."""
    stmts = getattr(func, "body", [])
    inits: dict[str, int] = {}
    for stmt in _walk(func):
        if (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
            and _zero_init(stmt.value)
            and any(w in stmt.targets[0].id.lower() for w in ("loss", "grad", "total", "acc", "sum"))
        ):
            inits.setdefault(stmt.targets[0].id, stmt.lineno)
    if not inits or not stmts:
        return
    for loop in _walk(func):
        if not isinstance(loop, (ast.For, ast.While)):
            continue
        body = [n for s in loop.body for n in _walk(s)]
        seeding = {
            id(n)
            for node in body
            if isinstance(node, ast.If) and _first_iteration_test(node.test)
            for s in node.body
            for n in _walk(s)
        }
        for name, line in inits.items():
            if line >= loop.lineno:
                continue
            overwrite: ast.AST | None = None
            for node in body:
                if overwrite is not None:
                    break
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                    receiver_ = node.func.value
                    if isinstance(receiver_, ast.Name) and receiver_.id == name and node.func.attr == "copy_":
                        overwrite = node
                elif isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == name for t in node.targets
                ):
                    if id(node) in seeding or _zero_init(node.value):
                        continue  # `if i == 0: acc = x`, `acc = torch.zeros(...)` (a reset)
                    if not any(isinstance(n, ast.Name) and n.id == name for n in _walk(node.value)):
                        overwrite = node  # `acc = x` (`acc = acc + x` and `acc += x` add)
            if overwrite is not None:  # never added to, or added on one path and overwritten on another
                yield overwrite, name


def _grad_output_names(backward: ast.FunctionDef) -> set[str]:
    args = backward.args
    names = {a.arg for a in [*args.posonlyargs, *args.args][1:]}
    if args.vararg is not None:
        names.add(args.vararg.arg)
    return names


# Tensor methods that scale their receiver in place by the argument (`grad_weight.mul_(grad_output)`).
_INPLACE_SCALES = frozenset({"mul_", "div_"})


def unscaled_gradients(backward: ast.FunctionDef) -> Iterator[tuple[ast.AST, str, str]]:
    """``(site, unscaled, scaled)`` in an autograd ``backward`` that returns gradients precomputed in the
    forward (read from `ctx.saved_tensors`) and multiplies some of them by the incoming gradient but returns
    another one as it is: the chain rule scales every input's gradient by `grad_output`, so a loss scaled after
    the kernel (by a coefficient, a loss-scale, the micro-batch weight) reaches one input and not the other."""
    incoming = _grad_output_names(backward)
    saved: set[str] = set()
    scaled: set[str] = set()
    for node in _walk(backward):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
            if "saved_tensors" in ast.unparse(value) and isinstance(target, (ast.Tuple, ast.List)):
                saved |= {e.id for e in target.elts if isinstance(e, ast.Name)}
            elif isinstance(target, ast.Name) and any(
                isinstance(n, ast.Name) and n.id in incoming for n in _walk(value)
            ):
                scaled.add(target.id)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _INPLACE_SCALES
            and isinstance(node.func.value, ast.Name)
            and any(
                isinstance(n, ast.Name) and n.id in incoming
                for a in [*node.args, *(k.value for k in node.keywords)]
                for n in _walk(a)
            )
        ):
            scaled.add(node.func.value.id)  # `grad_weight.mul_(grad_output)` scales in place
    if not saved or not scaled or not (saved & scaled):
        return
    for ret in _walk(backward):
        if not isinstance(ret, ast.Return) or not isinstance(ret.value, ast.Tuple):
            continue
        for elt in ret.value.elts:
            if isinstance(elt, ast.Name) and elt.id in saved and elt.id not in scaled:
                yield elt, elt.id, sorted(saved & scaled)[0]


# ---------------------------------------------------------------------------------------------------------------
# Loss values kept in half precision: a buffer or an accumulator of loss values (per-token losses, a loss sum,
# log-probabilities) created in bf16/fp16. Loss values are fp32 by the loss path's contract (the cross-entropy
# of upcast logits); a bf16 loss sum stops growing once it is ~256 times the increments it adds.

_HALF = frozenset({"bfloat16", "float16", "half"})
_LOSS_WORDS = frozenset(
    {"loss", "losses", "nll", "logp", "logps", "logprob", "logprobs", "entropy", "entropies"}
)
# a loss name's qualifier that makes it no loss value: a 0/1 mask, a weight, a scale or coefficient
_NOT_LOSS_VALUES = frozenset(
    {
        "mask",
        "masks",
        "weight",
        "weights",
        "scale",
        "scales",
        "scaler",
        "coef",
        "coeff",
        "coefficient",
        "factor",
    }
)
_BUFFER_MAKERS = frozenset(
    {
        "empty",
        "zeros",
        "ones",
        "full",
        "as_tensor",
        "tensor",
        "empty_like",
        "zeros_like",
        "ones_like",
        "full_like",
    }
)
_CE_NAMES = frozenset({"cross_entropy", "nll_loss", "log_softmax"})


def _half_dtype(call: ast.Call) -> bool:
    func = call.func
    if not isinstance(func, ast.Attribute):
        return False
    values = [k.value for k in call.keywords if k.arg == "dtype"]
    if func.attr == "to":
        values += list(call.args)
    elif func.attr not in _BUFFER_MAKERS:
        return False
    return any(isinstance(v, ast.Attribute) and v.attr in _HALF for v in values)


def _binding_words(target: ast.AST) -> set[str]:
    name = None
    if isinstance(target, ast.Name):
        name = target.id
    elif isinstance(target, ast.Attribute):
        name = target.attr
    elif isinstance(target, ast.Subscript):
        name = str_value(target.slice)
    elif isinstance(target, ast.Constant) and isinstance(target.value, str):
        name = target.value
    if not name:
        return set()
    words = name.lower().split("_")
    # ``log_probs`` is one word split in two
    return {*words, *(a + b for a, b in zip(words, words[1:]))}


def _downcast(node: ast.Call) -> bool:
    """``.to(<not fp32>)``, ``.bfloat16()``, ``.half()`` or ``.type_as(...)``: a value cast back down."""
    func = node.func
    if not isinstance(func, ast.Attribute):
        return False
    if func.attr in ("bfloat16", "half", "type_as"):
        return True
    if func.attr != "to":
        return False
    dtypes = [*node.args, *(k.value for k in node.keywords if k.arg == "dtype")]
    return bool(dtypes) and not any(
        isinstance(d, ast.Attribute) and d.attr in ("float32", "float", "float64", "double") for d in dtypes
    )


def _fp32_loss_value(value: ast.AST) -> bool:
    """A value computed in fp32: a cross-entropy / log-softmax, or anything with an fp32 upcast in it (unless
    it is cast back down, or is a softmax's probabilities, no loss values)."""
    calls = [n for n in walk(value) if isinstance(n, ast.Call)]
    if not any(
        (n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")) in _CE_NAMES
        for n in calls
    ):
        if any(_downcast(n) for n in calls):
            return False  # computed in fp32 and stored in the buffer's own dtype on purpose
        outer = value.func if isinstance(value, ast.Call) else None
        if outer is not None and (
            outer.attr if isinstance(outer, ast.Attribute) else getattr(outer, "id", "")
        ) in (
            "softmax",
            "sigmoid",
        ):
            return False  # probabilities, no loss values
    for node in walk(value):
        if isinstance(node, ast.Call):
            func = node.func
            last = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if last in _CE_NAMES or last in ("float", "double") and not node.args:
                return True
            if any(
                k.arg == "dtype" and isinstance(k.value, ast.Attribute) and k.value.attr == "float32"
                for k in node.keywords
            ):
                return True
    return False


def _upcast_of(value: ast.AST, name: str) -> bool:
    """``name.float()``, ``name.double()`` or ``name.to(torch.float32)``: the name rebound in fp32."""
    if not (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and isinstance(value.func.value, ast.Name)
        and value.func.value.id == name
    ):
        return False
    if value.func.attr in ("float", "double") and not value.args:
        return True
    dtypes = [*value.args, *(k.value for k in value.keywords if k.arg == "dtype")]
    return value.func.attr == "to" and any(
        isinstance(d, ast.Attribute) and d.attr in ("float32", "float", "float64", "double") for d in dtypes
    )


def half_loss_buffers(func: ast.AST) -> Iterator[tuple[ast.Call, str, str]]:
    """``(call, name, why)`` for a tensor of loss values created in bf16/fp16: bound to a loss name
    (``loss_sum``, ``per_token_loss``, ``"loss_sum":`` in a record) or filled later in the function with fp32
    loss values (``result[start:end] = F.cross_entropy(logits.float(), ...)``)."""
    stores: dict[str, ast.AST] = {}
    for node in nodes_of(func, ast.Assign):
        for t in node.targets:  # type: ignore[attr-defined]
            if (
                isinstance(t, ast.Subscript)
                and isinstance(t.value, ast.Name)
                and _fp32_loss_value(node.value)
            ):  # type: ignore[attr-defined]
                stores.setdefault(t.value.id, node)
    upcast: dict[str, int] = {}  # a name rebound in fp32 (the first line that does)
    for node in nodes_of(func, ast.Assign):
        for t in node.targets:  # type: ignore[attr-defined]
            if isinstance(t, ast.Name) and _upcast_of(node.value, t.id):  # type: ignore[attr-defined]
                upcast[t.id] = min(upcast.get(t.id, node.lineno), node.lineno)  # type: ignore[attr-defined]
    fills: dict[str, list[int]] = {}  # lines that add to a name or store into it in place
    for node in nodes_of(func, ast.AugAssign, ast.Assign):
        targets = [node.target] if isinstance(node, ast.AugAssign) else node.targets  # type: ignore[attr-defined]
        for t in targets:
            base = t.value if isinstance(t, ast.Subscript) else t if isinstance(node, ast.AugAssign) else None
            if isinstance(base, ast.Name):
                fills.setdefault(base.id, []).append(node.lineno)  # type: ignore[attr-defined]
    for node in nodes_of(func, ast.Assign, ast.Dict):
        pairs: list[tuple[ast.AST, ast.AST]] = []
        if isinstance(node, ast.Assign):
            pairs = [(t, node.value) for t in node.targets]
        else:
            pairs = [(k, v) for k, v in zip(node.keys, node.values, strict=True) if k is not None]  # type: ignore[attr-defined]
        for target, value in pairs:
            if not (isinstance(value, ast.Call) and _half_dtype(value)):
                continue
            words = _binding_words(target)
            if (
                isinstance(target, ast.Name)
                and target.id in upcast
                and upcast[target.id] > value.lineno
                and not any(value.lineno < line < upcast[target.id] for line in fills.get(target.id, ()))
            ):
                continue  # rebound in fp32 before it holds anything (``total_loss = total_loss.float()``)
            if words & _LOSS_WORDS and not words & _NOT_LOSS_VALUES:
                yield value, ast.unparse(target), "it holds loss values"
            elif isinstance(target, ast.Name) and target.id in stores:
                yield value, target.id, f"line {stores[target.id].lineno} fills it with fp32 loss values"  # type: ignore[attr-defined]
