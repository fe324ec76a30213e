"""NPU474: a norm's autograd backward whose returned gradients never use the saved weight's values; in kernels,
model files, specs and distributed helpers, with other names (gamma, scale, w); backwards that use it (directly,
through an alias, an in-place op or a kernel launch) and unweighted saved tensors (a bias, an output) are quiet."""

from __future__ import annotations

import textwrap

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from tests.rules.snippets import NORM_FUNCTION_HEAD

PATHS = [
    "veomni/ops/kernels/rms_norm/toy_fused.py",
    "veomni/models/transformers/toy/modeling_toy.py",
    "veomni/models/transformers/toy/toy_npu_patch_gen_config.py",
    "veomni/distributed/sequence_parallel/toy_norm.py",
]


def _lines(code: str, path: str) -> list[int]:
    src = SourceFile.from_text(path, "import torch\n\n\n" + textwrap.dedent(code).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, ["NPU474"], Settings()) if d.code == "NPU474")


HEAD = NORM_FUNCTION_HEAD

BAD = [
    # only the dtype read
    "        g = dy.float()\n        dw = (g * x_hat).sum(0).to({w}.dtype)\n"
    "        dx = rstd * (g - x_hat * (g * x_hat).mean(-1, keepdim=True))\n        return dx, dw, None\n",
    # a cast bound and never read
    "        w32 = {w}.float()\n        g = dy.float()\n        dw = (g * x_hat).sum(0)\n"
    "        dx = rstd * (g - x_hat * (g * x_hat).mean(-1, keepdim=True))\n        return dx.to(x.dtype), dw, None\n",
    # the shape only
    "        g = dy.float().view(-1, {w}.shape[0])\n        dx = rstd * g\n        return dx, None, None\n",
]

GOOD = [
    "        g = dy.float() * {w}.float()\n        dw = (dy.float() * x_hat).sum(0)\n"
    "        dx = rstd * (g - x_hat * (g * x_hat).mean(-1, keepdim=True))\n        return dx, dw, None\n",
    # through an alias and an in-place product
    "        w = {w}.float()\n        g = dy.float().clone()\n        g.mul_(w)\n        dx = rstd * g\n"
    "        return dx, None, None\n",
    # a kernel launch writing into the returned buffer
    "        dx = torch.empty_like(x)\n        dw = torch.empty_like({w})\n"
    "        _bwd_kernel[(x.shape[0],)](dy, x, {w}, rstd, dx, dw)\n        return dx, dw, None\n",
]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    ("cls", "w"), [("ToyRMSNormFn", "weight"), ("FusedLayerNormFunction", "gamma"), ("GatedNormOp", "scale")]
)
@pytest.mark.parametrize("body", BAD)
def test_weight_unused_in_gradients_is_reported(path: str, cls: str, w: str, body: str) -> None:
    code = HEAD.format(cls=cls, w=w) + body.format(w=w)
    assert len(_lines(code, path)) == 1


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(
    ("cls", "w"), [("ToyRMSNormFn", "weight"), ("FusedLayerNormFunction", "gamma"), ("GatedNormOp", "scale")]
)
@pytest.mark.parametrize("body", GOOD)
def test_weight_used_is_quiet(path: str, cls: str, w: str, body: str) -> None:
    code = HEAD.format(cls=cls, w=w) + body.format(w=w)
    assert _lines(code, path) == []


def test_an_unweighted_saved_tensor_and_a_non_norm_function_are_quiet() -> None:
    code = """
    class ToyLayerNormFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight, bias):
            ctx.save_for_backward(x, weight, bias)
            return x * weight + bias

        @staticmethod
        def backward(ctx, dy):
            x, weight, bias = ctx.saved_tensors
            return dy * weight, (dy * x).sum(0), dy.sum(0)


    class ToyScaleFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight):
            ctx.save_for_backward(x, weight)
            return x * weight

        @staticmethod
        def backward(ctx, dy):
            x, weight = ctx.saved_tensors
            return dy, (dy * x).sum(0)
    """
    assert _lines(code, "veomni/ops/kernels/toy/fused.py") == []
