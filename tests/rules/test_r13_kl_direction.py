"""NPU464: a KL term is weighted by the distribution whose log-probability is the minuend of its difference."""

from __future__ import annotations

import textwrap

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source

PATH = "veomni/ops/kernels/cross_entropy/chunk_topk_distill.py"


def _lines(text: str) -> list[int]:
    src = SourceFile.from_text(PATH, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, ["NPU464"], Settings()) if d.code == "NPU464")


@pytest.mark.parametrize(
    "expr",
    [
        "(tlp.exp() * (slp - tlp)).sum(-1)",
        "(torch.exp(tlp) * (slp.float() - tlp.float())).sum(-1)",
        "((slp - tlp) * tlp.float().exp()).sum(-1)",
    ],
)
def test_reversed_terms_are_reported(expr: str) -> None:
    text = f"""
    import torch


    def kl(tlp, slp):
        out = {expr}
        return out
    """
    assert _lines(text) == [5]


def test_a_weight_bound_to_a_local_is_followed() -> None:
    text = """
    def kl(tlp, slp):
        p_t = tlp.exp()
        return (p_t * (slp - tlp)).sum(-1)
    """
    assert _lines(text) == [3]


@pytest.mark.parametrize(
    "expr",
    [
        "(tlp.exp() * (tlp - slp)).sum(-1)",  # forward KL
        "(slp.exp() * (slp - tlp)).sum(-1)",  # reverse KL, weighted by the student
        "-(tlp.exp() * (slp - tlp)).sum(-1)",  # the cross term negated: the divergence again
        "(tlp.exp() * (tlp - slp - margin)).sum(-1)",  # the weight's own log-probability is the minuend
    ],
)
def test_divergences_are_quiet(expr: str) -> None:
    text = f"""
    def kl(tlp, slp, margin):
        out = {expr}
        return out
    """
    assert _lines(text) == []
