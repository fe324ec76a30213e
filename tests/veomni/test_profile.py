"""ApiProfile: the generation and every API name, read from each fixture tree (generation x layout)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from npu_lint.core.config import Settings
from npu_lint.veomni.profile import (
    BUILTIN_PROFILES,
    ApiProfile,
    Generation,
    builtin_profile,
    detect_generation,
    detect_profile,
)
from npu_lint.veomni.project import VEOMNI_KERNEL, VEOMNI_OP, load_project

TREES = Path(__file__).resolve().parent.parent / "fixtures" / "trees"

EXPECTED = {
    "op_slot_models": dict(
        generation=Generation.OP_SLOT,
        handle="OpSlot",
        handle_module="veomni.ops.dispatch",
        resolver=None,
        resolver_module=None,
        attention_helper=None,
        attention_module=None,
        loss_module="veomni.ops.kernels.cross_entropy",
        loss_helpers=("ForCausalLMLoss", "ForSequenceClassificationLoss"),
        loss_handle_keyword=None,
        bias_module=None,
        register_function="KernelSpec",
        registry_module="veomni.ops.kernel_registry",
        requirement_module="veomni.ops.kernel_registry",
        requirement_classes=("HardwareRequirement",),
        layouts=("veomni/models",),
        offset_rms_variant="qwen3_5",
        vision_rope=("rotary_pos_emb_vision", "full"),
    ),
    "veomni_op_models_kernel": dict(
        generation=Generation.VEOMNI_OP,
        handle="VeomniOp",
        handle_module="veomni.ops",
        resolver="resolve_op_impl",
        resolver_module="veomni.models_kernel.utils.op_utils",
        resolver_options=("npu_as",),
        attention_helper="attention_op",
        attention_module="veomni.models_kernel.utils.op_utils",
        # the OpSlot-era veomni.ops.kernels.cross_entropy is also there; its helper takes no handle
        loss_module="veomni.models_kernel.loss_utils",
        loss_helpers=("ForCausalLMLoss", "ForSequenceClassificationLoss"),
        loss_handle_keyword="op",
        bias_helpers=("empty_bias", "linear_bias"),
        bias_module="veomni.models_kernel.utils.op_utils",
        register_function="register_op",
        registry_object="OP_REGISTRY",
        resolve_function="resolve_op",
        registry_module="veomni.ops",
        requirement_module="veomni.ops.requirement",
        requirement_classes=("CudaKernelRequirement", "MluKernelRequirement", "NpuKernelRequirement"),
        layouts=("veomni/models_kernel",),
        offset_rms_variant="qwen3_5",  # this tree registers no "offset" row
        vision_rope=("rope_vision", "full"),
    ),
    "veomni_kernel_models_kernel": dict(
        generation=Generation.VEOMNI_KERNEL,
        handle="VeomniKernel",
        handle_module="veomni.kernels",
        resolver="resolve_kernel_impl",
        resolver_module="veomni.models_kernel.utils.kernel_utils",
        attention_helper="attention_kernel",
        attention_module="veomni.models_kernel.utils.kernel_utils",
        loss_module="veomni.models_kernel.utils.loss_utils",
        loss_helpers=("ForCausalLMLoss", "ForSequenceClassificationLoss", "ForTokenClassification"),
        loss_handle_keyword="kernel",
        bias_module="veomni.models_kernel.utils.kernel_utils",
        register_function="register_kernel",
        registry_object="KERNEL_REGISTRY",
        resolve_function="resolve_kernel",
        registry_module="veomni.kernels",
        requirement_module="veomni.kernels.requirement",
        requirement_classes=("CudaKernelRequirement", "KernelRequirement", "NpuKernelRequirement"),
        layouts=("veomni/models_kernel",),
        offset_rms_variant="qwen3_5",
        vision_rope=("rope_vision", "full"),
    ),
    # names are read, not assumed: the resolver, attention and bias helpers live in veomni.ops.config,
    # the handle is re-exported by a star import, requirements in veomni.ops.platform
    "veomni_op_ops_config": dict(
        generation=Generation.VEOMNI_OP,
        handle_module="veomni.ops",
        resolver_module="veomni.ops.config",
        attention_module="veomni.ops.config",
        bias_module="veomni.ops.config",
        loss_module="veomni.models.loss_utils",
        loss_helpers=("ForCausalLMLoss",),
        loss_handle_keyword="op",
        registry_module="veomni.ops",
        requirement_module="veomni.ops.platform",
        requirement_classes=("GpuKernelRequirement", "MluKernelRequirement", "NpuKernelRequirement"),
        layouts=("veomni/models",),
        offset_rms_variant="offset",  # this tree registers rms_norm/offset
    ),
}


@pytest.mark.parametrize("tree", sorted(EXPECTED))
def test_profile_names(tree: str) -> None:
    profile = detect_profile(TREES / tree)
    for name, value in EXPECTED[tree].items():
        assert getattr(profile, name) == value, name
    assert profile.detected == profile.generation
    if profile.generation is Generation.OP_SLOT:  # said once per run: dispatch is summarised per file
        assert len(profile.notes) == 1 and "no instance-local handle API" in profile.notes[0]
    else:
        assert profile.notes == ()
    assert profile.root == str(TREES / tree)
    assert profile.device_module == "veomni.utils.device"
    assert {"IS_NPU_AVAILABLE", "get_device_type", "get_torch_device"} <= set(profile.device_helpers)
    assert "get_dist_comm_backend" not in profile.device_helpers  # the fixture's device module lacks it
    # every name the profile names resolves in the tree
    for module, names in profile._table():
        for name in names:
            assert profile.defines(module, name), (module, name)
    assert profile.has_handle


@pytest.mark.parametrize("tree", sorted(EXPECTED))
def test_generation_detected(tree: str) -> None:
    assert detect_generation(TREES / tree) == EXPECTED[tree]["generation"]
    project = load_project([str(TREES / tree)])
    assert project.generation == EXPECTED[tree]["generation"]
    assert project.profile is not None and project.profile.generation == project.generation


def test_generation_compares_as_its_config_spelling() -> None:
    assert Generation.VEOMNI_KERNEL == "veomni-kernel"
    assert str(Generation.OP_SLOT) == "op-slot"
    assert Generation("veomni-op") is Generation.VEOMNI_OP


def test_registered_variants_read_from_the_tree() -> None:
    kernel = detect_profile(TREES / "veomni_kernel_models_kernel")
    assert kernel.variants_of("rms_norm") == ("qwen3_5", "standard", "unweighted")
    assert kernel.variants_of("rope_vision") == ("full",)
    assert kernel.variants_of("nope") == ()
    op = detect_profile(TREES / "veomni_op_models_kernel")
    assert op.variants_of("attention") == ("standard",)
    slot = detect_profile(TREES / "op_slot_models")
    assert slot.variants_of("rms_norm") == ("qwen3_5", "standard")


def test_builtin_profiles_answer_from_their_tables() -> None:
    default = builtin_profile()
    assert default is BUILTIN_PROFILES[Generation.VEOMNI_OP] and default.builtin
    assert default.defines("veomni.ops", "VeomniOp")
    assert not default.defines("veomni.ops", "OpSlot")
    assert default.can_import("veomni.models_kernel.utils.op_utils", ["resolve_op_impl", "linear_bias"])
    assert not default.can_import("veomni.ops.config", ["resolve_op_impl"])
    assert default.module_of("attention_op") == "veomni.models_kernel.utils.op_utils"
    slot = builtin_profile("op-slot")
    assert slot.defines("veomni.ops.dispatch", "OpSlot")
    assert slot.defines("veomni.ops.kernels.cross_entropy", "ForCausalLMLoss")
    assert not slot.defines("veomni.ops", "VeomniOp")
    kernel = builtin_profile(Generation.VEOMNI_KERNEL)
    assert kernel.defines("veomni.kernels", "VeomniKernel")
    assert kernel.loss_handle_keyword == "kernel"
    assert kernel.defines("veomni.utils.device", "get_torch_device")
    assert detect_profile(None) is default
    assert detect_profile(None, "veomni-kernel") is kernel


def test_target_api_overrides_and_says_so_once() -> None:
    tree = TREES / "op_slot_models"
    forced = detect_profile(tree, "veomni-op")
    assert forced.generation is Generation.VEOMNI_OP
    assert forced.detected is Generation.OP_SLOT
    assert len(forced.notes) == 1
    assert "VeomniOp" in forced.notes[0] and "op-slot" in forced.notes[0]
    assert not forced.has_handle  # the invariant: fixes must not import it here
    assert not forced.defines("veomni.ops", "VeomniOp")
    # the names fall back to the generation's built-in modules, the variants to its catalog
    assert forced.handle_module == "veomni.ops"
    assert forced.variants == BUILTIN_PROFILES[Generation.VEOMNI_OP].variants
    # forcing the generation the tree has says nothing
    assert detect_profile(tree, "op-slot").notes == ()
    assert detect_profile(tree, "auto").generation is Generation.OP_SLOT
    with pytest.raises(ValueError):
        detect_profile(tree, "veomni")


def test_target_api_through_settings_changes_the_project() -> None:
    tree = str(TREES / "veomni_op_models_kernel")
    auto = load_project([tree], Settings())
    forced = load_project([tree], Settings(target_api="veomni-kernel"))
    assert auto.generation == VEOMNI_OP and auto.notes == ()
    assert forced.api.generation == VEOMNI_KERNEL  # messages name the forced API ...
    assert forced.generation == VEOMNI_OP  # ... but what the code may import stays the tree's
    assert len(forced.notes) == 1 and "VeomniKernel" in forced.notes[0]
    assert auto.fingerprint() != forced.fingerprint()
    # outside any tree the built-in profile of the forced generation is used, without a note
    outside = load_project([str(TREES.parent / "dispatch")], Settings(target_api="veomni-kernel"))
    assert outside.root is None
    assert outside.api is BUILTIN_PROFILES[Generation.VEOMNI_KERNEL]
    assert outside.notes == ()


def test_project_with_profile_pickles_and_keeps_answering() -> None:
    project = load_project([str(TREES / "veomni_op_ops_config")])
    assert project.api.defines("veomni.ops", "VeomniOp")  # fills the index's cache
    clone = pickle.loads(pickle.dumps(project))
    assert clone.api == project.api
    assert clone.api.defines("veomni.ops", "VeomniOp")
    assert not clone.api.defines("veomni.ops", "VeomniKernel")
    assert clone.fingerprint() == project.fingerprint()


def test_a_project_built_by_hand_gets_the_builtin_profile() -> None:
    from npu_lint.veomni.project import Project

    project = Project(root="/x", generation="veomni-kernel")
    assert project.generation is Generation.VEOMNI_KERNEL
    assert isinstance(project.profile, ApiProfile)
    assert project.api.handle == "VeomniKernel"
    assert Project().api is BUILTIN_PROFILES[Generation.VEOMNI_OP]


def test_fixture_tree_outside_the_repo_layout(tmp_path: Path) -> None:
    """A tree without a device module keeps the built-in device names (nothing to read)."""
    (tmp_path / "veomni" / "kernels").mkdir(parents=True)
    (tmp_path / "veomni" / "kernels" / "__init__.py").write_text("class VeomniKernel:\n    pass\n")
    profile = detect_profile(tmp_path)
    assert profile.generation is Generation.VEOMNI_KERNEL
    assert profile.handle_module == "veomni.kernels"
    assert profile.device_helpers == BUILTIN_PROFILES[Generation.VEOMNI_KERNEL].device_helpers
    assert profile.layouts == ("veomni/models_kernel",)  # no packages: the generation's default


def test_catalog_in_a_profile_s_names() -> None:
    from npu_lint.veomni.catalog import BUILTIN_ROWS, catalog_rows, slot_target

    assert catalog_rows() is BUILTIN_ROWS
    kernel = builtin_profile(Generation.VEOMNI_KERNEL)
    rows = catalog_rows(kernel.offset_rms_variant)
    assert {r.variant for r in rows if r.op == "rms_norm"} == {
        "standard",
        "qwen3_5",
        "unweighted",
        "deepseek_v4",
    }
    assert kernel.variants_of("rms_norm") == ("deepseek_v4", "qwen3_5", "standard", "unweighted")
    tree = detect_profile(TREES / "veomni_op_models_kernel")
    assert slot_target("rms_norm", "qwen3_5", tree.offset_rms_variant, tree.vision_rope) == (
        "rms_norm",
        "qwen3_5",
    )
    assert slot_target("rotary_pos_emb_vision", "full", tree.offset_rms_variant, tree.vision_rope) == (
        "rope_vision",
        "full",
    )
    assert slot_target("rms_norm", "qwen3_5") == ("rms_norm", "offset")
    assert slot_target("rotary_pos_emb", "full") == ("rope", "full")
    assert slot_target("nope", "x") is None
