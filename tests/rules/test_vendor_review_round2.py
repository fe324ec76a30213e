"""Round-2 precision review of the vendor family (bench/accuracy/review-round2.md): the op a message names is
the one that covers the code, on VeOmni main and for out-of-tree names. Each case failed before its fix."""

from __future__ import annotations

from corpus import VEOMNI_MAIN, shared_tree

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni import vendor_map
from npu_lint.veomni.project import load_project


def test_vendor_names_map_to_the_op_they_implement() -> None:
    fused = vendor_map.lookup("liger_kernel.transformers.LigerFusedLinearCrossEntropyLoss")
    assert fused is not None and (fused.op, fused.variant) == ("cross_entropy_loss", "standard")
    gated = vendor_map.lookup("fla.modules.FusedRMSNormGated")
    assert gated is not None and (gated.op, gated.variant) == ("rms_norm_gated", "standard")
    conv = vendor_map.lookup("fla.modules.ShortConvolution")
    assert conv is not None and conv.op == "causal_conv1d"
    helper = vendor_map.lookup(
        "veomni.ops.kernels.gated_delta_rule._ascend.flash_gated_delta_rule.precompute_varlen_metadata"
    )
    assert helper is not None and helper.op is None and helper.note == vendor_map.HELPER_NOTE


def _lint_corpus_file(rel: str, codes: list[str]):  # noqa: ANN202
    root = shared_tree(VEOMNI_MAIN)
    path = root / rel
    src = SourceFile.from_text(str(path), path.read_text(encoding="utf-8"))
    return lint_source(src, codes, Settings(), load_project([str(path)]))


def test_main_vendor_messages_name_the_covering_slot() -> None:
    omni = _lint_corpus_file(
        "veomni/models/transformers/qwen3_omni_moe/generated/patched_modeling_qwen3_omni_moe_npu.py",
        ["NPU302"],
    )
    vision = [d for d in omni if d.line in (1128, 1129)]
    assert len(vision) == 2
    for d in vision:
        assert 'OpSlot("rotary_pos_emb_vision", "full")' in d.message, d.message
    qwen35 = _lint_corpus_file(
        "veomni/models/transformers/qwen3_5/qwen3_5_npu_patch_gen_config.py", ["NPU301"]
    )
    meta = [d for d in qwen35 if "precompute_varlen_metadata" in d.message]
    assert meta and all("chunk_gated_delta_rule" not in d.message for d in meta)
    foundation = _lint_corpus_file(
        "veomni/models/seed_omni/foundation/qwen3_moe_foundation/modeling_qwen3_moe_foundation.py", ["NPU302"]
    )
    liger = [d for d in foundation if "LigerFusedLinearCrossEntropyLoss" in d.message]
    assert liger and all("no registry op covers it" not in d.message for d in liger)
    assert all('OpSlot("cross_entropy_loss"' in d.message for d in liger)
