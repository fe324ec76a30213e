"""NPU301/NPU302 know the GPU-only kernel libraries a MoE or loss port reaches for (MegaBlocks, grouped GEMM,
cut cross-entropy, FlashInfer, Transformer Engine, mamba_ssm) and the Hugging Face kernels hub loader."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni.vendor_map import family_of, lookup


def test_families_and_replacements() -> None:
    assert family_of("megablocks.layers.dmoe") and lookup("megablocks.layers.dmoe").op == "moe_experts"  # type: ignore[union-attr]
    assert lookup("cut_cross_entropy.linear_cross_entropy").op == "cross_entropy_loss"  # type: ignore[union-attr]
    assert family_of("kernels") and lookup("kernels.get_kernel").op is None  # type: ignore[union-attr]
    assert family_of("veomni.kernels.registry") is None  # VeOmni's own kernel package is not the hub loader


def test_hub_loader_and_moe_library_in_model_code() -> None:
    code = """
    from kernels import get_kernel
    from ..kernels import local_registry  # a relative import of the tree's own package


    def toy_experts_forward(self, hidden_states):
        from grouped_gemm import ops as gg

        moe = get_kernel("org/moe")
        return gg.gmm(hidden_states, self.w1, self.batch_sizes) + moe.forward(hidden_states)
    """
    src = SourceFile.from_text(
        "veomni/models/transformers/toy/toy_gpu_patch_gen_config.py", textwrap.dedent(code).lstrip()
    )
    diags = lint_source(src, ["NPU301", "NPU302"], Settings())
    assert {(d.code, d.line) for d in diags} >= {("NPU301", 1), ("NPU301", 6), ("NPU302", 9)}
    assert not any(d.line == 2 for d in diags)
