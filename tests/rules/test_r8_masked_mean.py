"""NPU435: a masked average divided by every position's count; variants another engineer would write (torch.sum,
a cast mask, a mask parameter, len/shape/numel of another tensor, a local count), the line it must be reported
at, and correct variants (the mask's count through a local, a clamp) that stay quiet."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source

PATH = "veomni/trainer/toy_trainer.py"


def _lines(text: str) -> list[int]:
    src = SourceFile.from_text(PATH, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, ["NPU435"], Settings()) if d.code == "NPU435")


CODE = """
import torch


def chosen_logp(logps, tgt, pad_id):
    valid = (tgt != pad_id).float()
    return torch.sum(logps * valid, dim=-1) / tgt.shape[-1]


def response_mean(values, response_mask):
    n = len(values)
    return (values * response_mask.to(values.dtype)).sum() / n


def own_numel(values, labels):
    keep = labels != -100
    return (values * keep).sum() / keep.numel()


def fine(values, labels):
    keep = labels != -100
    total = keep.sum().clamp_min(1)
    return (values * keep).sum() / total
"""


def test_masked_mean_variants() -> None:
    assert _lines(CODE) == [6, 11, 16]


def test_masked_mean_quiet_variants() -> None:
    fixed = CODE.replace("/ tgt.shape[-1]", "/ valid.sum(-1).clamp(min=1)").replace(
        "n = len(values)", "n = response_mask.sum()"
    )
    fixed = fixed.replace("/ keep.numel()", "/ keep.sum()")
    assert _lines(fixed) == []
