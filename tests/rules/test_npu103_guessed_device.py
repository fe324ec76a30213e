"""NPU103: a fix that names a tensor other than the data the allocation is combined with is only a guess."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.diagnostics import Applicability
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source

MODULE = """
import torch
from torch import nn


class Decoder(nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.dims = dims
        self.proj = nn.Linear(4, 4)

    def forward(self, inputs: torch.Tensor, points: torch.Tensor):
        pos = torch.stack(torch.unravel_index(points, self.dims), dim=1)
        pos = {expr}
        return self.proj(inputs) + pos.sum()
"""


def _fix(expr: str) -> Applicability | None:
    src = SourceFile.from_text("m.py", textwrap.dedent(MODULE.format(expr=expr)))
    found = [d for d in lint_source(src, ["NPU103"], Settings(), None) if d.code == "NPU103"]
    assert len(found) == 1, found
    return found[0].fix.applicability if found[0].fix else None


def test_combined_with_other_data_the_fix_is_unsafe() -> None:
    assert _fix("pos / torch.tensor(self.dims)") is Applicability.UNSAFE


def test_combined_with_the_named_tensor_the_fix_stays_safe() -> None:
    assert _fix("inputs.sum() * torch.ones(4)") is Applicability.SAFE
