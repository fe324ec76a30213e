"""The one saved-for-backward analysis (``veomni.backward.kept_for_backward``) that NPU444 and NPU474 ask: each
value a Function's forward keeps, whether the backward reads it, and whether the gradients it returns depend on
its values; and the two rules' views of it on one class (a value read for its dtype only is read, so NPU444 is
quiet, but does not reach the gradients, so NPU474 reports it when it is a norm's weight)."""

from __future__ import annotations

import ast
import textwrap

import pytest

from npu_lint.veomni.backward import Kept, kept_for_backward
from tests.rules.snippets import NORM_FUNCTION_HEAD, lint_snippet

CLS = """
\"\"\"A norm fused into the loss.\"\"\"
import torch


class {name}(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, {w}, scale):
        ctx.save_for_backward(x, {w})
        ctx.scale = scale
        ctx.unused_flag = True
        return x * {w} * scale

    @staticmethod
    def backward(ctx, dy):
        x, {w} = ctx.saved_tensors
        g = dy.to({w}.dtype) * ctx.scale
        return g, (dy * x).sum(0), None
"""


def _kept(text: str) -> dict[str, Kept]:
    cls = next(n for n in ast.walk(ast.parse(textwrap.dedent(text))) if isinstance(n, ast.ClassDef))
    return {k.name: k for k in kept_for_backward(cls)}


def test_each_kept_value_with_both_uses() -> None:
    kept = _kept(CLS.format(name="ScaledNormFn", w="gamma"))
    assert set(kept) == {"ctx.scale", "ctx.unused_flag", "x", "gamma"}
    assert (kept["gamma"].read, kept["gamma"].gradient) == (True, False)  # its dtype only
    assert (kept["x"].read, kept["x"].gradient) == (True, True)
    assert (kept["ctx.scale"].attribute, kept["ctx.scale"].read) == (True, True)
    assert (kept["ctx.unused_flag"].read, kept["ctx.unused_flag"].gradient) == (False, None)


def test_a_backward_handing_its_context_to_a_helper_is_not_judged_for_gradients() -> None:
    text = CLS.format(name="NormFn", w="weight").replace(
        "        return g,", "        _finish(ctx, g)\n        return g,"
    )
    kept = _kept(text)
    assert kept["weight"].gradient is None and kept["weight"].read


def test_the_two_rules_ask_the_same_analysis() -> None:
    # a norm's Function in a loss file: the weight read for its dtype only is NPU474's (values never reach the
    # gradient) and not NPU444's (the backward reads it); the context flag never read is NPU444's
    text = CLS.format(name="FusedNormLossFunction", w="weight")
    found = lint_snippet("veomni/ops/kernels/loss/norm_loss.py", text, ["NPU444", "NPU474"])
    assert sorted({d.code for d in found}) == ["NPU444", "NPU474"]
    assert [d.line for d in found if d.code == "NPU474"] == [15]
    assert all("unused_flag" in d.message for d in found if d.code == "NPU444")


def test_weight_used_by_value_leaves_both_quiet() -> None:
    text = CLS.format(name="FusedNormLossFunction", w="weight").replace("dy.to(weight.dtype)", "dy * weight")
    text = text.replace("        ctx.unused_flag = True\n", "")
    assert lint_snippet("veomni/ops/kernels/loss/norm_loss.py", text, ["NPU444", "NPU474"]) == []


NORM_FN = (
    "\nimport torch\n\n"
    + NORM_FUNCTION_HEAD.replace("{cls}", "{name}")
    + """        g32 = dy.float()
        w32 = {w}.float()
        d = g32
        dx = rstd * (d - x_hat * (d * x_hat).mean(-1, keepdim=True))
        return dx.to(x.dtype), (g32 * x_hat).sum(0), None
"""
)


@pytest.mark.parametrize(
    ("path", "name", "w"),
    [
        ("veomni/ops/kernels/rms_norm/triton_deterministic.py", "DeterministicRMSNormFunction", "weight"),
        ("veomni/models/transformers/toy/modeling_toy.py", "ToyNormFn", "gamma"),
        ("veomni/distributed/sequence_parallel/sp_norm.py", "SPNormFunction", "scale"),
    ],
)
def test_npu474_points_at_the_statement_that_drops_the_weight(path: str, name: str, w: str) -> None:
    text = NORM_FN.format(name=name, w=w)
    assert [d.line for d in lint_snippet(path, text, ["NPU474"])] == [16]  # `w32 = w.float()`, never used
    # read for its dtype only: nothing was computed from it, so the unpacking is where it is dropped
    text = text.replace(f"        w32 = {w}.float()\n", "").replace(
        "(g32 * x_hat).sum(0)", f"(g32 * x_hat).sum(0).to({w}.dtype)"
    )
    assert [d.line for d in lint_snippet(path, text, ["NPU474"])] == [13]
    text = NORM_FN.format(name=name, w=w).replace("d = g32\n", "d = g32 * w32\n")
    assert lint_snippet(path, text, ["NPU474"]) == []
