"""NPU467: a shape unpack's axis names are the reference for the axis an RMS statistic reduces over."""

from __future__ import annotations

import textwrap

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source

PATH = "veomni/models/diffusers/toy_dit/feature_extractor.py"

TEXT = """
import torch


def per_token_rms(encoded_text):
    B, T, D, L = encoded_text.shape
    variance = torch.mean(encoded_text**2, dim=2, keepdim=True)
    return (encoded_text * torch.rsqrt(variance + 1e-6)).reshape(B, T, D * L)
"""


def _lines(text: str) -> list[int]:
    src = SourceFile.from_text(PATH, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, ["NPU467"], Settings()) if d.code == "NPU467")


@pytest.mark.parametrize(
    "stat",
    ["torch.mean(encoded_text**2, dim=2, keepdim=True)", "encoded_text.square().mean(dim=-2, keepdim=True)"],
)
def test_the_hidden_axis_is_quiet(stat: str) -> None:
    text = TEXT.replace("torch.mean(encoded_text**2, dim=2, keepdim=True)", stat)
    assert _lines(text) == []


@pytest.mark.parametrize(
    "stat",
    [
        "torch.mean(encoded_text**2, dim=-1, keepdim=True)",
        "encoded_text.pow(2).mean(3, keepdim=True)",
        "encoded_text.float().square().mean(dim=1, keepdim=True)",
    ],
)
def test_another_named_axis_is_reported(stat: str) -> None:
    text = TEXT.replace("torch.mean(encoded_text**2, dim=2, keepdim=True)", stat)
    assert text != TEXT
    assert _lines(text) == [6]


def test_without_a_root_or_a_hidden_name_nothing_is_judged() -> None:
    no_root = TEXT.replace("torch.rsqrt(variance + 1e-6)", "variance").replace("dim=2", "dim=-1")
    assert _lines(no_root) == []
    unnamed = TEXT.replace("B, T, D, L", "B, T, X, L").replace("D * L", "X * L").replace("dim=2", "dim=-1")
    assert _lines(unnamed) == []
