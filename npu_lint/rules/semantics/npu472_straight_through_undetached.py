"""NPU472 straight-through-undetached."""

from __future__ import annotations

import ast

from npu_lint.core.astutil import last_name
from npu_lint.rules.base import Context, Example, Rule
from npu_lint.rules.semantics._shared import first_report

_DETACH = ("detach", "detach_", "stop_gradient")


def _signed_terms(node: ast.AST, sign: int, out: list[tuple[int, ast.AST]]) -> None:
    """The additive terms of ``node`` with their signs: `a + (b - a)` -> [+a, +b, -a]. A detached group
    (`(b - a).detach()`) stays one term."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        _signed_terms(node.left, sign, out)
        _signed_terms(node.right, -sign if isinstance(node.op, ast.Sub) else sign, out)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        _signed_terms(node.operand, -sign, out)
    else:
        out.append((sign, node))


def _tensor_like(node: ast.AST) -> bool:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return isinstance(node, ast.Name) and node.id not in ("self", "cls")


def straight_through_faults(expr: ast.BinOp) -> str | None:
    """`x + (y - x)` (one operand both added and subtracted, neither side detached): an identity that is only
    ever written as the straight-through estimator `x + (y - x).detach()` with its detach lost."""
    terms: list[tuple[int, ast.AST]] = []
    _signed_terms(expr, 1, terms)
    if len(terms) != 3 or any(isinstance(t, ast.Call) and last_name(t.func) in _DETACH for _, t in terms):
        return None
    seen: dict[str, set[int]] = {}
    for sign, term in terms:
        if _tensor_like(term):
            seen.setdefault(ast.unparse(term), set()).add(sign)
    for text, signs in seen.items():
        if signs == {1, -1}:
            others = [ast.unparse(t) for sign, t in terms if ast.unparse(t) != text and sign > 0]
            if len(others) == 1:  # the quantised operand is added: the value is `+x_q`
                return f"`{text}` is added and subtracted around `{others[0]}`"
    return None


class StraightThroughUndetached(Rule):
    code = "NPU472"
    name = "straight-through-undetached"
    summary = (
        "`x + (x_q - x)` with no `.detach()`: the straight-through estimator without its detach is the plain "
        "quantised value, so no gradient reaches the encoder through it."
    )
    why = (
        "The straight-through estimator of VQ-VAE / VQGAN quantisers, Gumbel hard sampling and fake-quant "
        "layers returns `x + (x_q - x).detach()` (or `y_hard - y_soft.detach() + y_soft`): the forward value is "
        "the quantised one and the backward is the identity into `x`. An expression that adds and subtracts the "
        "same operand around another with no detach on either side is algebraically just the other operand: the "
        "reconstruction loss's gradient flows into the codebook (or the rounding) instead of the encoder, whose "
        "parameters only learn from the commitment term, on every device and with no error. Checked in every "
        "function of any file: an additive expression of three terms where one tensor operand appears both "
        "added and subtracted and no term is detached."
    )
    bad = (
        Example(
            """
            def quantize(self, z):
                idx = torch.cdist(z, self.codebook.weight).argmin(-1)
                z_q = self.codebook(idx)
                z_q = z + (z_q - z)
                return z_q, idx
            """,
            path="veomni/models/transformers/toy_vq/modeling_toy_vq.py",
        ),
    )
    good = (
        Example(
            """
            def quantize(self, z):
                idx = torch.cdist(z, self.codebook.weight).argmin(-1)
                z_q = self.codebook(idx)
                z_q = z + (z_q - z).detach()
                return z_q, idx
            """,
            path="veomni/models/transformers/toy_vq/modeling_toy_vq.py",
        ),
    )
    fix_safety = "No fix: restore the detach on the difference (`x + (x_q - x).detach()`)."
    requires = (("+", "-"),)
    node_types = (ast.BinOp,)

    @classmethod
    def applies_to(cls, ctx: Context) -> bool:
        return not ctx.source.kind.test

    def visit(self, node: ast.AST) -> None:
        assert isinstance(node, ast.BinOp)
        if not isinstance(node.op, (ast.Add, ast.Sub)):
            return
        covered = self.ctx.memo.setdefault((self.code, "inner"), set())
        assert isinstance(covered, set)
        if id(node) in covered:
            return
        for sub in ast.walk(node):
            if isinstance(sub, ast.BinOp) and isinstance(sub.op, (ast.Add, ast.Sub)):
                covered.add(id(sub))
        detail = straight_through_faults(node)
        if detail and first_report(self, node):
            self.report(
                node,
                f"straight-through estimator without its detach: {detail}, which is just that operand "
                "(the gradient never reaches the first); detach the difference",
            )
