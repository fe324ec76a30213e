"""Round-2 precision review of the device family (bench/accuracy/review-round2.md): each case failed before
its fix."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source

MODEL = "veomni/models/transformers/toy/modeling_toy.py"


def lint(code: str, codes: list[str], path: str = MODEL):  # noqa: ANN201
    src = SourceFile.from_text(path, textwrap.dedent(code).lstrip("\n"))
    return lint_source(src, codes, Settings(), None)


def test_torch_tensor_of_a_device_tensor_keeps_its_device() -> None:
    """deimv2/d_fine: ``torch.tensor(spatial_shapes)`` where ``spatial_shapes`` is indexed like a tensor, and
    ``torch.as_tensor(<tensor parameter>)``; a literal list is still a CPU allocation."""
    code = """
    import torch
    from torch import nn


    class Attn(nn.Module):
        def forward(self, hidden_states, reference_points, spatial_shapes=None):
            assert (spatial_shapes[:, 0] * spatial_shapes[:, 1]).sum() == hidden_states.shape[1]
            offset_normalizer = torch.tensor(spatial_shapes)
            scale = torch.as_tensor(hidden_states)
            bias = torch.tensor([1.0, 2.0])
            return reference_points / offset_normalizer.flip([1]) * scale + bias + hidden_states
    """
    assert [d.line for d in lint(code, ["NPU103"])] == [10]


def test_no_device_from_a_value_that_can_be_a_plain_int() -> None:
    """vilt: ``limit = min(t.max(), limit)`` keeps the int when it is smaller: ``device=limit.device`` would
    raise, so the fix takes the device from a value that is always a tensor."""
    code = """
    import torch
    from torch import nn


    class Embed(nn.Module):
        def forward(self, x_mask, limit=200):
            if limit < 0:
                limit = x_mask.sum(-1).max()
            else:
                limit = min(x_mask.sum(-1).max(), limit)
            picks = torch.multinomial(torch.ones(x_mask.shape[0]).float(), limit)
            return x_mask[picks]
    """
    (diag,) = lint(code, ["NPU103"])
    assert "add `device=x_mask.device`" in diag.message
    assert diag.fix is not None and all("limit" not in e.content for e in diag.fix.edits)


def test_cuda_only_method_walk_handles_every_call_shape() -> None:
    """qwen3_next: a class with plain-function calls, chained calls and a CUDA runtime call (the method walk
    raised on ``f(x)``); the unguarded `torch.cuda.current_device()` is still reported."""
    code = """
    import torch
    from torch import nn


    class Gated(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.norm = make_norm(dim, device=torch.cuda.current_device())
            self.proj = nn.Linear(dim, dim).float()

        def forward(self, x):
            return self.proj(self.norm(x))
    """
    assert [d.line for d in lint(code, ["NPU102"])] == [8]
