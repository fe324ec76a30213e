"""Injected failures, one per copy of VeOmni main (../shared/corpora), each caught by the check that owns it."""

from __future__ import annotations

import pytest
from verify_helpers import TRANSFORMERS, findings, run_verify, statuses

pytestmark = pytest.mark.corpus


def _edit(path, old: str, new: str, count: int = 1) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) >= count, f"{old!r} not in {path.name}"
    path.write_text(text.replace(old, new), encoding="utf-8")


def test_npu_spec_that_drops_a_patch(mutable_tree, patchgen_dir):
    qwen3 = mutable_tree / TRANSFORMERS / "qwen3"
    spec = qwen3 / "qwen3_npu_patch_gen_config.py"
    spec.write_text(
        spec.read_text()
        + '\nconfig.patches = [p for p in config.patches if p.target != "Qwen3MLP.forward"]\n'
    )
    code, report, _ = run_verify(
        str(qwen3), "--checks", "patchgen", "--format", "json", "--patchgen", str(patchgen_dir)
    )
    assert code == 1 and statuses(report) == {"patchgen": "fail"}
    # main commits each generated module's diff against upstream too: both differ, nothing else
    found = findings(report, "patchgen")
    assert sorted(f["what"] for f in found) == [
        f"generated/patched_modeling_qwen3_npu.{ext} differs from what its spec produces"
        for ext in ("diff", "py")
    ]
    assert all("NPU505" in f["fix"] for f in found)
    diff = report["models"][0]["checks"][0]["details"]
    assert "class Qwen3MLP" in diff or "Qwen3MLP.forward" in diff
    assert "+++ patchgen/patched_modeling_qwen3_gpu.py" not in diff  # the GPU module is unchanged


def test_generated_file_edited_by_hand(mutable_tree, patchgen_dir):
    qwen3 = mutable_tree / TRANSFORMERS / "qwen3"
    gen = qwen3 / "generated" / "patched_modeling_qwen3_npu.py"
    _edit(
        gen,
        "variance = hidden_states.pow(2).mean(-1, keepdim=True)",
        "variance = hidden_states.pow(2).mean(-1, keepdim=True) + 0.0",
    )
    code, report, _ = run_verify(
        str(qwen3), "--checks", "patchgen", "--format", "json", "--patchgen", str(patchgen_dir)
    )
    assert code == 1 and statuses(report) == {"patchgen": "fail"}
    details = report["models"][0]["checks"][0]["details"]
    assert "-        variance = hidden_states.pow(2).mean(-1, keepdim=True) + 0.0" in details
    assert "+        variance = hidden_states.pow(2).mean(-1, keepdim=True)\n" in details


def test_submodule_renamed_without_conversion_mapping(mutable_tree):
    qwen3 = mutable_tree / TRANSFORMERS / "qwen3"
    gen = qwen3 / "generated" / "patched_modeling_qwen3_npu.py"
    _edit(gen, "self.norm = Qwen3RMSNorm(", "self.final_norm = Qwen3RMSNorm(")
    _edit(gen, "hidden_states = self.norm(hidden_states)", "hidden_states = self.final_norm(hidden_states)")
    code, report, _ = run_verify(str(qwen3), "--checks", "checkpoint", "--format", "json")
    assert code == 1 and statuses(report) == {"checkpoint": "fail"}
    whats = [f["what"] for f in findings(report, "checkpoint")]
    assert whats == [
        "npu: 1 upstream checkpoint keys match no parameter: model.norm.weight",
        "npu: 1 parameters are not in the upstream checkpoint: model.final_norm.weight",
    ]
    assert "_checkpoint_conversion_mapping" in findings(report, "checkpoint")[0]["fix"]


def test_handle_shared_across_models(mutable_tree):
    """On the OpSlot generation module-scope slots are the design: every one is listed, none is a failure."""
    gemma3 = mutable_tree / TRANSFORMERS / "gemma3"
    gen = gemma3 / "generated" / "patched_modeling_gemma3_gpu.py"
    code, report, _ = run_verify(str(gemma3), "--checks", "isolation", "--format", "json")
    (before,) = [c for c in report["models"][0]["checks"] if c["check"] == "isolation"]
    assert "veomni_rms_norm" not in before["details"]
    _edit(
        gen,
        'veomni_causal_lm_loss = OpSlot("cross_entropy_loss", "causal")',
        'veomni_causal_lm_loss = OpSlot("cross_entropy_loss", "causal")\nveomni_rms_norm = OpSlot("rms_norm", "standard")',
    )
    code, report, _ = run_verify(str(gemma3), "--checks", "isolation", "--format", "json")
    assert code == 0 and statuses(report) == {"isolation": "not attainable"}
    (after,) = [c for c in report["models"][0]["checks"] if c["check"] == "isolation"]
    assert after["details"].startswith(
        "gpu module binds 2 OpSlots at module scope (veomni_causal_lm_loss, veomni_rms_norm): this tree is of the "
        "OpSlot generation"
    )
    assert "NPU201" in after["details"] and not after["findings"]


def test_text_only_path_that_skips_the_vision_tower(mutable_tree):
    vl = mutable_tree / TRANSFORMERS / "qwen3_vl"
    for side in ("gpu", "npu"):
        _edit(
            vl / "generated" / f"patched_modeling_qwen3_vl_{side}.py",
            "elif get_parallel_state().fsdp_enabled:",
            "elif False:",
            2,
        )
    code, report, _ = run_verify(str(vl), "--checks", "multimodal", "--format", "json")
    assert code == 1 and statuses(report) == {"multimodal": "fail"}
    fs = findings(report, "multimodal")
    assert [f["what"].split(":")[0] for f in fs] == ["gpu", "npu"]
    assert all("only with media: model.visual." in f["what"] and "dummy_forward" in f["fix"] for f in fs)


def test_projector_renamed_is_left_uninitialised(mutable_tree):
    vl = mutable_tree / TRANSFORMERS / "qwen3_vl"
    gen = vl / "generated" / "patched_modeling_qwen3_vl_npu.py"
    _edit(gen, "self.merger = Qwen3VLVisionPatchMerger(", "self.projector = Qwen3VLVisionPatchMerger(")
    _edit(
        gen,
        "merged_hidden_states = self.merger(hidden_states)",
        "merged_hidden_states = self.projector(hidden_states)",
    )
    code, report, _ = run_verify(str(vl), "--checks", "checkpoint", "--format", "json")
    assert code == 1
    whats = [f["what"] for f in findings(report, "checkpoint")]
    assert len(whats) == 3 and all(w.startswith("npu: ") for w in whats)
    assert "model.visual.merger." in whats[0]
    assert "model.visual.projector." in whats[1]
    assert whats[2].startswith(
        "npu: vision/projector parameters left uninitialised after loading: model.visual.projector."
    )


def test_vendor_kernel_imported_at_module_level(mutable_tree):
    import importlib.util

    # the test environment is CPU-only (make test installs no torch_npu): the injected import fails there
    assert importlib.util.find_spec("torch_npu") is None, (
        "torch_npu is installed: the injected import succeeds"
    )
    qwen3 = mutable_tree / TRANSFORMERS / "qwen3"
    gen = qwen3 / "generated" / "patched_modeling_qwen3_npu.py"
    _edit(
        gen,
        "from veomni.ops.dispatch import OpSlot",
        "from veomni.ops.dispatch import OpSlot\nimport torch_npu",
    )
    code, report, _ = run_verify(str(qwen3), "--checks", "import", "--format", "json")
    assert code == 1 and statuses(report) == {"import": "fail"}
    (finding,) = findings(report, "import")
    assert "imports `torch_npu` at import time" in finding["what"] and "NPU301" in finding["fix"]
