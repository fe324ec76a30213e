"""NPU320: an extension operator called through ``torch.ops`` with its registration import pruned, in regions
other than the dev case (the Ascend gated-delta-rule kernels)."""

from __future__ import annotations

from tests.rules.snippets import lint_snippet


def _lines(text: str, path: str) -> list[int]:
    return sorted(d.line for d in lint_snippet(path, text, ["NPU320"]))


def test_npu_extension_op_in_generated_model_file() -> None:
    assert _lines(
        """
        import torch
        import torch_npu


        def indexer(q, k, weights):
            scores = torch.ops.npu.npu_lightning_indexer(q, k, weights, layout="BSND")
            return torch_npu.npu_format_cast(scores, 2)
        """,
        "veomni/models/transformers/deepseek_v32/generated/patched_modeling_deepseek_v32_npu.py",
    ) == [6]


def test_tree_extension_namespace_in_distributed_code() -> None:
    assert _lines(
        """
        import torch


        def fused_permute(tokens, indices):
            out = torch.ops.veomni_ext.fused_permute(tokens, indices)
            return torch.ops.veomni_ext.fused_unpermute(out, indices)
        """,
        "veomni/distributed/moe/fused_permute.py",
    ) == [5]


def test_mindspeed_op_in_a_loss_kernel() -> None:
    assert _lines(
        """
        from typing import Optional

        import torch


        def fused_ce(logits: torch.Tensor, labels: torch.Tensor, weight: Optional[torch.Tensor] = None):
            return torch.ops.mindspeed.npu_fused_cross_entropy(logits, labels)
        """,
        "veomni/ops/kernels/cross_entropy/mindspeed_ce.py",
    ) == [7]


def test_registered_or_builtin_operators_stay_quiet() -> None:
    kept = """
        import torch
        import torch_npu

        import fla_npu as _fla_ops  # noqa: F401


        def chunk_fwd_o(q, k, v, h, g, scale):
            return torch.ops.npu.npu_chunk_fwd_o(q, k, v, h, g, scale=scale)
        """
    assert _lines(kept, "veomni/ops/kernels/gdr/_ascend/chunk_o.py") == []
    relative = """
        import torch

        from . import _C  # noqa: F401


        def fused_permute(tokens, indices):
            return torch.ops.veomni_ext.fused_permute(tokens, indices)
        """
    assert _lines(relative, "veomni/distributed/moe/fused_permute.py") == []
    defined = """
        import torch


        @torch.library.custom_op("veomni_ext::scale", mutates_args=())
        def scale(x: torch.Tensor) -> torch.Tensor:
            return x * 2


        def use(x):
            return torch.ops.veomni_ext.scale(x)
        """
    assert _lines(defined, "veomni/ops/kernels/scale/custom.py") == []
    builtin = """
        import torch


        def f(x, w):
            y = torch.ops.aten.mm(x, w)
            return torch.ops.npu.npu_rms_norm(y, w, epsilon=1e-6)[0]
        """
    assert _lines(builtin, "veomni/ops/kernels/rms_norm/npu.py") == []
