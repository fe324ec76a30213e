"""Round 14 dispatch checks, tested on injected variants in other files of the same region than their dev cases:
registry lookups that answer a miss with the eager row (NPU228, every resolver under veomni/ops), model packages'
choice of their NPU/GPU module (NPU233, every registration function) and handles whose implementation comes from
a tree-defined zero-argument resolver of another op (NPU204, every handle construction)."""

from __future__ import annotations

from pathlib import Path

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni.project import load_project
from tests.rules.snippets import lint_snippet, write_file


def _lines(source: str, code: str, path: str) -> list[int]:
    return [d.line for d in lint_snippet(path, source, [code])]


# -- NPU228: a lookup miss answered with the eager row ---------------------------------------------------------


def test_opslot_kernel_registry_unknown_name_returns_the_eager_sentinel() -> None:
    # veomni-main ops/kernel_registry.py shape: None is this function's own "eager" answer
    source = """
    class KernelRegistry:
        def resolve(self, op_name, variant, impl_name):
            if impl_name == "eager":
                return None
            bucket = self._specs.get((op_name, variant), {})
            if impl_name not in bucket:
                return None
            return bucket[impl_name].factory()
    """
    assert _lines(source, "NPU228", "veomni/ops/kernel_registry.py") == [7]
    raised = source.replace(
        "                return None\n            return bucket",
        "                raise KeyError(impl_name)\n            return bucket",
    )
    assert _lines(raised, "NPU228", "veomni/ops/kernel_registry.py") == []


def test_handle_registry_missing_key_renamed_to_eager_after_a_device_check() -> None:
    # a VeomniOp-era registry: the row exists for other devices -> raise; otherwise the name becomes eager
    source = """
    class OpRegistry:
        def resolve(self, op, variant, impl):
            key = (op, variant, impl, ANY_DEVICE)
            if key not in self._entries:
                if any(k[:3] == key[:3] for k in self._entries):
                    raise RuntimeError(f"{op}/{variant}/{impl}: not for this device")
                impl = "eager"
            return self._entries[(op, variant, impl, ANY_DEVICE)]
    """
    assert _lines(source, "NPU228", "veomni/ops/registry.py") == [7]


def test_ops_config_op_table_miss_takes_the_eager_entry() -> None:
    source = """
    def backend_for(op_name, backend):
        table = BACKENDS[op_name]
        if backend not in table:
            return table["eager"]
        return table[backend]


    def cached(cache, key, build):
        if key not in cache:
            cache[key] = build(key)
        return cache[key]
    """
    assert _lines(source, "NPU228", "veomni/ops/config/registry.py") == [4]


# -- NPU233: the NPU module chosen by more than the device ----------------------------------------------------

_PKG = "veomni/models/transformers/{model}/__init__.py"


def test_text_registration_gated_on_a_config_flag() -> None:
    source = """
    from ....utils.device import IS_NPU_AVAILABLE


    def register_qwen3_5_text_modeling(architecture: str, config=None):
        if IS_NPU_AVAILABLE and getattr(config, "use_fused_kernels", True):
            from .generated.patched_modeling_qwen3_5_npu import Qwen3_5ForCausalLM
        else:
            from .generated.patched_modeling_qwen3_5_gpu import Qwen3_5ForCausalLM
        return Qwen3_5ForCausalLM
    """
    assert _lines(source, "NPU233", _PKG.format(model="qwen3_5")) == [5]


def test_module_alias_import_widened_with_or() -> None:
    source = """
    import os

    from ....utils.device import IS_NPU_AVAILABLE


    def register_deepseek_v4_modeling(architecture: str):
        if IS_NPU_AVAILABLE or os.environ.get("VEOMNI_FORCE_NPU_MODULE"):
            from .generated import patched_modeling_deepseek_v4_npu as gen
        else:
            from .generated import patched_modeling_deepseek_v4_gpu as gen
        return gen.DeepseekV4ForCausalLM
    """
    assert _lines(source, "NPU233", _PKG.format(model="deepseek_v4")) == [7]


def test_kernel_tree_package_excludes_lora_from_the_npu_module() -> None:
    source = """
    from veomni.utils.device import IS_NPU_AVAILABLE


    def register_qwen3_modeling(architecture: str, lora: bool = False):
        if not lora and IS_NPU_AVAILABLE:
            from .generated.patched_modeling_qwen3_npu import Qwen3ForCausalLM
        elif "ForCausalLM" in architecture:
            from .generated.patched_modeling_qwen3_gpu import Qwen3ForCausalLM
        else:
            raise ValueError(architecture)
        return Qwen3ForCausalLM
    """
    assert _lines(source, "NPU233", "veomni/models_kernel/transformers/qwen3/__init__.py") == [5]


def test_module_choice_quiet_for_device_only_tests() -> None:
    source = """
    from ....utils.device import IS_NPU_AVAILABLE, is_torch_npu_available


    def register_a(architecture: str):
        if IS_NPU_AVAILABLE:
            from .generated.patched_modeling_a_npu import A
        else:
            from .generated.patched_modeling_a_gpu import A
        return A


    def register_b(architecture: str):
        if not is_torch_npu_available():
            from .generated.patched_modeling_b_gpu import B
        else:
            from .generated.patched_modeling_b_npu import B
        if B and "ForCausalLM" in architecture:
            return B
        return None
    """
    assert _lines(source, "NPU233", _PKG.format(model="a")) == []


# -- NPU204: a tree-defined resolver of another op's field ---------------------------------------------------


def _tree_lines(root: Path, path: Path, code: str) -> list[int]:
    project = load_project([str(root)])
    found = lint_source(
        SourceFile.from_text(str(path), path.read_text()), [code], Settings(), project=project
    )
    return [d.line for d in found if d.code == code]


_OP_UTILS = '''
from veomni.ops.config import get_ops_config


def resolve_op_impl(field: str) -> str:
    cfg = get_ops_config()
    return "eager" if cfg is None else getattr(cfg, field, "eager")


def resolve_moe_impl() -> str:
    """The active moe_experts implementation."""
    return resolve_op_impl("moe_implementation")


def resolve_norm_impl() -> str:
    return resolve_op_impl("rms_norm_implementation")
'''


def test_handles_built_with_another_ops_resolver(tmp_path: Path) -> None:
    write_file(tmp_path, "veomni/__init__.py", "")
    write_file(tmp_path, "veomni/ops/__init__.py", "from .registry import VeomniOp  # noqa: F401\n")
    write_file(
        tmp_path,
        "veomni/ops/registry.py",
        "class VeomniOp:\n    def __init__(self, op, variant, impl='eager'):\n        pass\n",
    )
    write_file(tmp_path, "veomni/models_kernel/__init__.py", "")
    write_file(tmp_path, "veomni/models_kernel/utils/__init__.py", "")
    write_file(tmp_path, "veomni/models_kernel/utils/op_utils.py", _OP_UTILS)
    model = write_file(
        tmp_path,
        "veomni/models_kernel/transformers/deepseek_v3/modeling_deepseek_v3.py",
        """
        from veomni.models_kernel.utils.op_utils import resolve_moe_impl, resolve_norm_impl
        from veomni.ops import VeomniOp


        class DeepseekV3MoE:
            def __init__(self, config):
                self.veomni_moe = VeomniOp("moe_experts", "standard", resolve_moe_impl())
                self.veomni_rope = VeomniOp("rope", "full", resolve_moe_impl())


        class DeepseekV3RMSNormGated:
            def __init__(self, config):
                self.veomni_norm = VeomniOp("rms_norm", "standard", resolve_norm_impl())
                impl = resolve_norm_impl()
                self.veomni_gated = VeomniOp("rms_norm_gated", "standard", impl)
        """,
    )
    assert _tree_lines(tmp_path, model, "NPU204") == [8, 14]


# -- NPU214: a spec's replacement rotary, judged by the upstream function it replaces --------------------------

_ROPE_SPEC = """
from veomni.models_kernel.utils.op_utils import resolve_op_impl
from veomni.ops import VeomniOp
from veomni.patchgen import PatchConfig

config = PatchConfig(source_module="transformers.models.{model}.modeling_{model}", target_file="x.py")


@config.replace_function("apply_rotary_pos_emb", description="rope handle")
def {name}(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    rope = VeomniOp("rope", "{variant}", resolve_op_impl("rotary_pos_emb_implementation"))
    return rope(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)
"""


def _rope(model: str, name: str, variant: str, device: str = "gpu") -> list[int]:
    path = f"veomni/models_kernel/transformers/{model}/{model}_{device}_patch_gen_config.py"
    text = _ROPE_SPEC.format(model=model, name=name, variant=variant)
    return _lines(text, "NPU214", path)


def test_replacement_rotary_variant_against_the_replaced_upstream_function() -> None:
    # Llama and Qwen3 rotate the whole head upstream; GLM rotates `cos.shape[-1]` dims and passes the rest
    assert _rope("llama", "apply_rotary_pos_emb_patched", "partial") == [10]
    assert _rope("qwen3", "apply_rotary_pos_emb_npu", "partial", device="npu") == [10]
    assert _rope("glm", "glm_apply_rotary_pos_emb", "full") == [10]
    assert _rope("llama", "apply_rotary_pos_emb_patched", "full") == []
    assert _rope("glm", "glm_apply_rotary_pos_emb", "partial") == []


def test_vision_slot_declared_with_the_text_op_is_reported_at_its_declaration() -> None:
    source = """
    from veomni.ops.dispatch import OpSlot

    veomni_apply_rotary_pos_emb_vision = OpSlot("rotary_pos_emb", "full")


    def apply_rotary_pos_emb_vision(q, k, cos, sin):
        if veomni_apply_rotary_pos_emb_vision.use_non_eager_impl:
            return veomni_apply_rotary_pos_emb_vision(q, k, cos, sin)
        return q, k
    """
    for path in (
        "veomni/models/transformers/qwen3_vl_moe/generated/patched_modeling_qwen3_vl_moe_gpu.py",
        "veomni/models/transformers/qwen3_omni_moe/generated/patched_modeling_qwen3_omni_moe_npu.py",
        "veomni/models/transformers/qwen2_vl/generated/patched_modeling_qwen2_vl_gpu.py",
    ):
        assert _lines(source, "NPU214", path) == [3], path


def test_replacement_target_passed_by_its_keyword() -> None:
    """patchgen's ``replace_function(target_func, ...)``: the keyword spelling names the replaced function too."""
    spec = _ROPE_SPEC.replace(
        'replace_function("apply_rotary_pos_emb"', 'replace_function(target_func="apply_rotary_pos_emb"'
    )
    text = spec.format(model="llama", name="apply_rotary_pos_emb_patched", variant="partial")
    assert _lines(
        text, "NPU214", "veomni/models_kernel/transformers/llama/llama_gpu_patch_gen_config.py"
    ) == [10]
