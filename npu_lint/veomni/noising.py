"""The forward-noising process of a diffusion / flow-matching objective, read statically: the interpolation a
training step (or a scheduler) builds, `x_t = (1 - s) * x0 + s * noise`, and what it implies for the target and
the x0 reconstruction a loss regresses onto.

An interpolation has a *rising* operand (coefficient `s`) and a *falling* one (coefficient `1 - s`): its
velocity `d x_t / d s` is `rising - falling`, and `x_t - s * velocity` recovers the falling operand. Diffusers'
``scale_noise(sample, timestep, noise)`` and VeOmni's flow-match ``add_noise(original_samples, noise, ...)``
return `sigma * noise + (1 - sigma) * sample`: the noise rises. A scaled mix `a * x0 + b * noise` with other
coefficients (DDPM's `sqrt(abar) * x0 + sqrt(1 - abar) * eps`) is read as a noising too when exactly one operand
is the function's Gaussian draw (the noise is what is sampled); it implies no velocity, only which operand is the
noise."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from npu_lint.core.astutil import last_name, nodes_of

_CASTS = ("to", "float", "double", "half", "bfloat16", "type", "type_as", "contiguous", "clone")


@dataclass(frozen=True)
class Interpolation:
    site: ast.AST
    name: str | None  # the local the noisy value is bound to
    rising: str  # leaf name of the operand with coefficient `s` (the noise, in the usual convention)
    falling: str  # leaf name of the operand with coefficient `1 - s` (the data)
    coefficient: str | None  # the text of `s` (None for a scheduler call)
    flow: bool = True  # a flow-matching interpolation (`1 - s` / `s`), not a scaled mix `a * x0 + b * noise`


def leaf(node: ast.AST) -> str | None:
    """The name an operand reads, through casts / device moves: `noise.to(device=d)` -> `noise`."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _CASTS:
        node = node.func.value
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return None
    return None


def _is_one_minus(node: ast.AST) -> str | None:
    """`s` of `(1 - s)` / `(1.0 - s)`."""
    if (
        isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.Sub)
        and isinstance(node.left, ast.Constant)
        and node.left.value in (1, 1.0)
    ):
        return ast.unparse(node.right)
    return None


def _factors(node: ast.AST) -> list[ast.AST] | None:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return [node.left, node.right]
    return None


def _readings(term: ast.AST) -> list[tuple[str, bool, str]]:
    """The ways to read a product term as coefficient times operand: (coefficient text, whether it is a
    `1 - s` whose `s` is the text, operand leaf)."""
    factors = _factors(term)
    if not factors:
        return []
    a, b = factors
    out = []
    for coef, operand in ((a, b), (b, a)):
        name = leaf(operand)
        if name is None:
            continue
        one_minus = _is_one_minus(coef)
        out.append((one_minus, True, name) if one_minus is not None else (ast.unparse(coef), False, name))
    return out


def _interpolation_of(value: ast.AST) -> tuple[str, str, str] | None:
    """(rising, falling, s) of `s * a + (1 - s) * b` in any order of terms and factors."""
    if not (isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add)):
        return None
    left, right = _readings(value.left), _readings(value.right)
    for ones, others in ((left, right), (right, left)):
        for s, is_one_minus, falling in ones:
            if not is_one_minus:
                continue
            for coef, plain, rising in others:
                if not plain and coef == s and rising != falling:
                    return rising, falling, s
    return None


def _call_interpolation(call: ast.Call) -> tuple[str, str] | None:
    """(rising, falling) of a scheduler call that noises a sample."""
    name = last_name(call.func)
    args = call.args
    if name == "scale_noise" and len(args) >= 3:
        rising, falling = leaf(args[2]), leaf(args[0])
    elif name == "add_noise" and len(args) >= 2:
        rising, falling = leaf(args[1]), leaf(args[0])
    else:
        return None
    if rising and falling and rising != falling:
        return rising, falling
    return None


_GAUSSIAN = ("randn", "randn_like", "normal", "normal_")


def _drawn(func: ast.AST) -> set[str]:
    """Locals ``func`` binds only to a Gaussian draw (`noise = torch.randn_like(x0)`): the noise it mixes in."""
    drawn: set[str] = set()
    other: set[str] = set()
    for n in nodes_of(func, ast.Assign):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            value = n.value
            while (
                isinstance(value, ast.Call)
                and isinstance(value.func, ast.Attribute)
                and value.func.attr in _CASTS
            ):
                value = value.func.value
            random = isinstance(value, ast.Call) and last_name(value.func) in _GAUSSIAN
            (drawn if random else other).add(n.targets[0].id)
    return drawn - other


def _scaled_mix(value: ast.AST, drawn: set[str]) -> tuple[str, str] | None:
    """(noise, sample) of `a * sample + b * noise` (DDPM's `sqrt(abar) * x0 + sqrt(1 - abar) * eps`, any
    coefficients) where exactly one operand is the function's Gaussian draw: the noise is what is sampled."""
    if not (isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add)):
        return None
    operands = []
    for term in (value.left, value.right):
        names = {r[2] for r in _readings(term)}
        noise = names & drawn
        rest = names - drawn
        operands.append((noise, rest))
    (n1, r1), (n2, r2) = operands
    if len(n1) == 1 and not n2 and len(r2) == 1:
        return next(iter(n1)), next(iter(r2))
    if len(n2) == 1 and not n1 and len(r1) == 1:
        return next(iter(n2)), next(iter(r1))
    return None


def may_noise(tree: ast.AST) -> bool:
    """A cheap pre-check: ``tree`` holds something an interpolation is read from (a `1 - s` coefficient, a
    scheduler's `scale_noise` / `add_noise`, a Gaussian draw); a file without one holds no noising."""
    for n in nodes_of(tree, ast.BinOp):
        if (
            isinstance(n.op, ast.Sub)  # type: ignore[attr-defined]
            and isinstance(n.left, ast.Constant)  # type: ignore[attr-defined]
            and n.left.value in (1, 1.0)  # type: ignore[attr-defined]
        ):
            return True
    return any(
        last_name(c.func) in ("scale_noise", "add_noise", *_GAUSSIAN)  # type: ignore[attr-defined]
        for c in nodes_of(tree, ast.Call)
    )


def interpolations(func: ast.AST) -> list[Interpolation]:
    found = []
    drawn: set[str] | None = None
    for n in nodes_of(func, ast.Assign, ast.Return):  # the only kinds read below, in walk order
        if isinstance(n, ast.Assign) and len(n.targets) == 1:
            target = n.targets[0].id if isinstance(n.targets[0], ast.Name) else None
            got = _interpolation_of(n.value)
            if got:
                found.append(Interpolation(n, target, got[0], got[1], got[2]))
                continue
            if isinstance(n.value, ast.BinOp) and isinstance(n.value.op, ast.Add):
                if drawn is None:
                    drawn = _drawn(func)
                mix = _scaled_mix(n.value, drawn) if drawn else None
                if mix:
                    found.append(Interpolation(n, target, mix[0], mix[1], None, flow=False))
                    continue
            elif isinstance(n.value, ast.Call):
                called = _call_interpolation(n.value)
                if called:
                    found.append(Interpolation(n, target, called[0], called[1], None))
        elif isinstance(n, ast.Return) and n.value is not None:
            got = _interpolation_of(n.value)
            if got:
                found.append(Interpolation(n, None, got[0], got[1], got[2]))
    return found


def _params(func: ast.AST) -> set[str]:
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return set()
    a = func.args
    return {p.arg for p in a.posonlyargs + a.args + a.kwonlyargs}


def reversed_targets(
    func: ast.AST, own: list[Interpolation], siblings: list[Interpolation]
) -> Iterator[tuple[ast.AST, str]]:
    """A velocity target `falling - rising` (the negated velocity): `target = x0 - noise` against
    `x_t = (1 - s) * x0 + s * noise`. ``own``: the interpolations of ``func``; ``siblings``: those of the other
    methods of its class (a scheduler's `add_noise` / `training_target` pair), matched by the noise's name."""
    params = _params(func)
    own = [it for it in own if it.flow]
    siblings = [it for it in siblings if it.flow]
    for n in nodes_of(func, ast.Call, ast.Assign):  # the only kinds read below, in walk order
        if isinstance(n, ast.Call) and own:
            # a target written inline: `mse_loss(pred, latents - noise)`
            value = _loss_target(n)
            if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Sub):
                yield from _against(value, value, own)
            continue
        if not (isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)):
            continue
        if "target" not in n.targets[0].id.lower() and "velocity" not in n.targets[0].id.lower():
            continue
        value = n.value
        if not (isinstance(value, ast.BinOp) and isinstance(value.op, ast.Sub)):
            continue
        minuend, subtrahend = leaf(value.left), leaf(value.right)
        if not minuend or not subtrahend or minuend == subtrahend:
            continue
        for it in own:
            if minuend == it.falling and subtrahend == it.rising:
                yield (
                    n,
                    (
                        f"`{ast.unparse(value)}` is the negated velocity of the noising `{_shown(it)}` "
                        f"(d/ds is `{it.rising} - {it.falling}`)"
                    ),
                )
                break
        else:
            if {minuend, subtrahend} <= params:
                for it in siblings:
                    if subtrahend == it.rising and minuend != it.rising:
                        yield (
                            n,
                            (
                                f"`{ast.unparse(value)}` subtracts `{subtrahend}`, the operand the class's noising "
                                f"`{_shown(it)}` raises: the velocity is `{it.rising} - <sample>`"
                            ),
                        )
                        break


def _loss_target(call: ast.Call) -> ast.AST | None:
    """The regression target of a loss call: `target=` or its second positional argument."""
    if "loss" not in (last_name(call.func) or "").lower():
        return None
    kw = next((k.value for k in call.keywords if k.arg == "target"), None)
    if kw is not None:
        return kw
    return call.args[1] if len(call.args) >= 2 else None


def _against(site: ast.AST, value: ast.BinOp, own: list[Interpolation]) -> Iterator[tuple[ast.AST, str]]:
    """``value`` (`a - b`) as the negated velocity of one of the flow interpolations ``own``."""
    minuend, subtrahend = leaf(value.left), leaf(value.right)
    if not minuend or not subtrahend or minuend == subtrahend:
        return
    for it in own:
        if minuend == it.falling and subtrahend == it.rising:
            yield (
                site,
                (
                    f"`{ast.unparse(value)}` is the negated velocity of the noising `{_shown(it)}` "
                    f"(d/ds is `{it.rising} - {it.falling}`)"
                ),
            )
            return


def _shown(it: Interpolation) -> str:
    text = ast.unparse(it.site.value if isinstance(it.site, (ast.Assign, ast.Return)) else it.site)
    return text if len(text) <= 70 else text[:67] + "..."


def _has_factor(node: ast.AST, text: str) -> bool:
    factors = _factors(node)
    return bool(factors) and any(ast.unparse(f) == text for f in factors)


def reconstruction_faults(func: ast.AST, own: list[Interpolation]) -> Iterator[tuple[ast.AST, str]]:
    """`x_t + s * v`: an x0 reconstruction from a velocity that adds the step instead of subtracting it
    (`x0 = x_t - s * v`)."""
    for it in own:
        if it.name is None or it.coefficient is None:
            continue
        for n in nodes_of(func, ast.BinOp):
            if not (isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add)):
                continue
            for a, b in ((n.left, n.right), (n.right, n.left)):
                if isinstance(a, ast.Name) and a.id == it.name and _has_factor(b, it.coefficient):
                    others = [f for f in _factors(b) or [] if ast.unparse(f) != it.coefficient]
                    if others and leaf(others[0]) not in (it.rising, it.falling, None):
                        yield (
                            n,
                            (
                                f"`{ast.unparse(n)}` adds `{it.coefficient}` times the prediction to the noisy "
                                f"`{it.name}` (`{_shown(it)}`): x0 is `{it.name} - {it.coefficient} * v`"
                            ),
                        )
                    break


def epsilon_onto_data(func: ast.AST, own: list[Interpolation]) -> Iterator[tuple[ast.AST, str]]:
    """A noise prediction (`noise_pred`, `eps`) regressed onto the data operand of the noising."""
    for it in own:
        for n in nodes_of(func, ast.Call):
            if not isinstance(n, ast.Call):
                continue
            callee = (last_name(n.func) or "").lower()
            if "loss" not in callee:
                continue
            if len(n.args) < 2:
                continue
            pred, target = leaf(n.args[0]), leaf(n.args[1])
            if not pred or not target:
                continue
            if ("noise_pred" in pred or pred.startswith("eps")) and target == it.falling:
                yield (
                    n,
                    (
                        f"the noise prediction `{pred}` is regressed onto `{target}`, the clean operand of the "
                        f"noising `{_shown(it)}` (the noise is `{it.rising}`)"
                    ),
                )
