"""Round 19 dispatch contracts, tested on variants written in other files, regions and models than their dev cases:

- NPU233: on an Ascend host a model package imports its NPU generated module and only it (on a GPU host the GPU
  one), whatever the shape of the device test (any number of extra conditions, nested tests, early returns, a
  name holding the test, a ``try`` falling back) and whichever branch does it (both branches importing the GPU
  module while the package has the NPU one);
- NPU222: a helper turning an ops-config implementation name into the name to bind keeps the NPU name on an NPU
  host (no eager for calls that leave out ``npu_as``, no table, rewrite or prefix test mapping it to eager).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from tests.rules.snippets import lint_snippet


def _lines(source: str, code: str, path: str) -> list[int]:
    return [d.line for d in lint_snippet(path, source, [code])]


# -- NPU233: each host's module ---------------------------------------------------------------------------------


def test_three_operand_narrowing_in_a_kernel_tree_package() -> None:
    source = """
    from veomni.models_kernel.registry import MODELING_REGISTRY
    from veomni.utils.device import IS_NPU_AVAILABLE


    @MODELING_REGISTRY.register("llama")
    def register_llama_modeling(architecture: str, config=None):
        if IS_NPU_AVAILABLE and config is not None and not config.tie_word_embeddings:
            from .generated.patched_modeling_llama_npu import LlamaForCausalLM, LlamaModel
        else:
            from .generated.patched_modeling_llama_gpu import LlamaForCausalLM, LlamaModel
        return LlamaModel if "Model" == architecture else LlamaForCausalLM
    """
    found = lint_snippet("veomni/models_kernel/transformers/llama/__init__.py", source, ["NPU233"])
    assert [d.line for d in found] == [7]
    assert "config is not None and (not config.tie_word_embeddings)" in found[0].message


def test_nested_narrowing_inside_the_npu_branch() -> None:
    source = """
    from ....utils.device import IS_NPU_AVAILABLE
    from ...loader import MODELING_REGISTRY


    @MODELING_REGISTRY.register("deepseek_v3")
    def register_deepseek_v3_modeling(architecture: str):
        if IS_NPU_AVAILABLE:
            if architecture.endswith("ForCausalLM"):
                from .generated.patched_modeling_deepseek_v3_npu import DeepseekV3ForCausalLM as cls
            else:
                from .generated.patched_modeling_deepseek_v3_gpu import DeepseekV3Model as cls
        else:
            from .generated.patched_modeling_deepseek_v3_gpu import DeepseekV3ForCausalLM as cls
        return cls
    """
    assert _lines(source, "NPU233", "veomni/models/transformers/deepseek_v3/__init__.py") == [8]


def test_early_return_narrowed_by_an_environment_variable_in_a_diffusers_package() -> None:
    source = """
    import os

    from veomni.utils.device import is_torch_npu_available


    def load_wan_transformer():
        if is_torch_npu_available() and os.getenv("WAN_NPU_PATCHES", "1") == "1":
            from .generated.patched_transformer_wan_npu import WanTransformer3DModel

            return WanTransformer3DModel
        from .generated.patched_transformer_wan_gpu import WanTransformer3DModel

        return WanTransformer3DModel
    """
    assert _lines(source, "NPU233", "veomni/models/diffusers/wan/__init__.py") == [7]


def test_module_level_name_holding_a_narrowed_device_test() -> None:
    source = """
    from veomni.utils.device import get_device_type

    _USE_ASCEND_MODULE = get_device_type() == "npu" and not __debug__

    if _USE_ASCEND_MODULE:
        from .generated.patched_modeling_glm4_npu import Glm4ForCausalLM
    else:
        from .generated.patched_modeling_glm4_gpu import Glm4ForCausalLM
    """
    assert _lines(source, "NPU233", "veomni/models/seed_omni/glm4/__init__.py") == [5]


def test_npu_branch_falling_back_to_the_gpu_module_when_its_import_fails() -> None:
    source = """
    from veomni.utils.device import IS_NPU_AVAILABLE


    def register_mistral_modeling(architecture: str):
        if IS_NPU_AVAILABLE:
            try:
                from .generated.patched_modeling_mistral_npu import MistralForCausalLM
            except ImportError:
                from .generated.patched_modeling_mistral_gpu import MistralForCausalLM
        else:
            from .generated.patched_modeling_mistral_gpu import MistralForCausalLM
        return MistralForCausalLM
    """
    found = lint_snippet("veomni/models/transformers/mistral/__init__.py", source, ["NPU233"])
    assert [d.line for d in found] == [7]
    assert "fails" in found[0].message


def test_npu_branch_importing_the_gpu_module_of_a_second_model_type() -> None:
    # a package with two model types: the text backbone's NPU branch imports the GPU module
    source = """
    from veomni.utils.device import IS_NPU_AVAILABLE


    def register_gemma3_modeling(architecture: str):
        if IS_NPU_AVAILABLE:
            from .generated import patched_modeling_gemma3_npu as modeling
        else:
            from .generated import patched_modeling_gemma3_gpu as modeling
        return modeling.Gemma3ForConditionalGeneration


    def register_gemma3_text_modeling(architecture: str):
        if IS_NPU_AVAILABLE:
            from .generated import patched_modeling_gemma3_gpu as modeling
        else:
            from .generated import patched_modeling_gemma3_gpu as modeling
        return modeling.Gemma3ForCausalLM
    """
    found = lint_snippet("veomni/models_kernel/transformers/gemma3/__init__.py", source, ["NPU233"])
    assert [d.line for d in found] == [14]
    assert "patched_modeling_gemma3_npu" in found[0].message


def test_npu_branch_importing_the_gpu_module_when_the_npu_module_is_on_disk(tmp_path: Path) -> None:
    package = tmp_path / "veomni" / "models" / "transformers" / "qwen2"
    (package / "generated").mkdir(parents=True)
    (package / "generated" / "patched_modeling_qwen2_gpu.py").write_text("class Qwen2ForCausalLM: ...\n")
    source = textwrap.dedent(
        """
        from veomni.utils.device import IS_NPU_AVAILABLE


        def register_qwen2_modeling(architecture: str):
            if IS_NPU_AVAILABLE:
                from .generated.patched_modeling_qwen2_gpu import Qwen2ForCausalLM
            else:
                from .generated.patched_modeling_qwen2_gpu import Qwen2ForCausalLM
            return Qwen2ForCausalLM
        """
    ).lstrip()
    init = package / "__init__.py"
    init.write_text(source)

    def lines() -> list[int]:
        found = lint_source(SourceFile.from_text(str(init), source), ["NPU233"], Settings())
        return [d.line for d in found if d.code == "NPU233"]

    assert lines() == []  # no NPU module yet: nothing to choose
    (package / "generated" / "patched_modeling_qwen2_npu.py").write_text("class Qwen2ForCausalLM: ...\n")
    assert lines() == [6]


def test_second_model_type_registration_without_a_switch() -> None:
    source = """
    from veomni.models_kernel.registry import MODELING_REGISTRY
    from veomni.utils.device import IS_NPU_AVAILABLE


    @MODELING_REGISTRY.register("qwen2_vl")
    def register_qwen2_vl_modeling(architecture: str):
        if IS_NPU_AVAILABLE:
            from .generated.patched_modeling_qwen2_vl_npu import Qwen2VLForConditionalGeneration
        else:
            from .generated.patched_modeling_qwen2_vl_gpu import Qwen2VLForConditionalGeneration
        return Qwen2VLForConditionalGeneration


    @MODELING_REGISTRY.register("qwen2_vl_text")
    def register_qwen2_vl_text_modeling(architecture: str):
        from .generated.patched_modeling_qwen2_vl_gpu import Qwen2VLTextModel

        return Qwen2VLTextModel
    """
    assert _lines(source, "NPU233", "veomni/models_kernel/transformers/qwen2_vl/__init__.py") == [16]


def test_npu_branch_importing_another_models_npu_module() -> None:
    source = """
    from veomni.utils.device import is_torch_npu_available


    def register_qwen3_moe_modeling(architecture: str):
        if is_torch_npu_available():
            from .generated.patched_modeling_qwen3_npu import Qwen3MoeForCausalLM
        else:
            from .generated.patched_modeling_qwen3_moe_gpu import Qwen3MoeForCausalLM
        return Qwen3MoeForCausalLM
    """
    assert _lines(source, "NPU233", "veomni/models/transformers/qwen3_moe/__init__.py") == [6]


def test_device_flag_rebound_to_a_constant() -> None:
    source = """
    from veomni.utils.device import IS_NPU_AVAILABLE

    IS_NPU_AVAILABLE = False  # TODO: NPU module not validated for the MoE router yet


    def register_qwen2_moe_modeling(architecture: str):
        if IS_NPU_AVAILABLE:
            from .generated.patched_modeling_qwen2_moe_npu import Qwen2MoeForCausalLM
        else:
            from .generated.patched_modeling_qwen2_moe_gpu import Qwen2MoeForCausalLM
        return Qwen2MoeForCausalLM
    """
    assert _lines(source, "NPU233", "veomni/models/transformers/qwen2_moe/__init__.py") == [3]


def test_device_flag_imported_as_another_probe() -> None:
    source = """
    from veomni.models_kernel.registry import MODELING_REGISTRY
    from veomni.utils.device import IS_CUDA_AVAILABLE as IS_NPU_AVAILABLE


    @MODELING_REGISTRY.register("gpt_oss")
    def register_gpt_oss_modeling(architecture: str):
        if IS_NPU_AVAILABLE:
            from .generated.patched_modeling_gpt_oss_npu import GptOssForCausalLM
        else:
            from .generated.patched_modeling_gpt_oss_gpu import GptOssForCausalLM
        return GptOssForCausalLM
    """
    assert _lines(source, "NPU233", "veomni/models_kernel/transformers/gpt_oss/__init__.py") == [2]


def test_device_flag_bound_to_the_probe_is_quiet() -> None:
    source = """
    from veomni.utils.import_utils import is_torch_npu_available

    IS_NPU_AVAILABLE = is_torch_npu_available()


    def register_olmo_modeling(architecture: str):
        if IS_NPU_AVAILABLE:
            from .generated.patched_modeling_olmo_npu import OlmoForCausalLM
        else:
            from .generated.patched_modeling_olmo_gpu import OlmoForCausalLM
        return OlmoForCausalLM
    """
    assert _lines(source, "NPU233", "veomni/models/transformers/olmo/__init__.py") == []


def test_module_choice_quiet_for_correct_switches() -> None:
    source = """
    from veomni.utils.device import IS_MLU_AVAILABLE, IS_NPU_AVAILABLE


    def register_a(architecture: str):
        if IS_NPU_AVAILABLE:
            from .generated.patched_modeling_a_npu import A
        elif IS_MLU_AVAILABLE:
            from .generated.patched_modeling_a_mlu import A
        else:
            from .generated.patched_modeling_a_gpu import A
        return A


    def register_b(architecture: str):
        if IS_NPU_AVAILABLE:
            from .generated.patched_modeling_b_npu import B

            return B
        from .generated.patched_modeling_b_gpu import B

        if "ForCausalLM" in architecture:
            return B
        return B


    def register_c(architecture: str):
        if not IS_NPU_AVAILABLE:
            from .generated.patched_modeling_c_gpu import C
        else:
            from .generated.patched_modeling_c_npu import C
        return C


    def register_d(architecture: str):
        if IS_NPU_AVAILABLE:
            from .generated.patched_modeling_d_gpu import D  # no NPU module of d anywhere: nothing to choose
        else:
            from .generated.patched_modeling_d_gpu import D
        return D


    def register_e(architecture: str):
        from .generated.patched_modeling_e_gpu import E  # e has no NPU module in this file: NPU502's question

        return E


    def register_f_text(architecture: str):
        if IS_NPU_AVAILABLE:
            from .generated.patched_modeling_f_npu import FText
        else:
            from .generated.patched_modeling_f_gpu import FText
        return FText


    def register_f(architecture: str):
        if IS_NPU_AVAILABLE:
            from .generated.patched_modeling_f_npu import F
        else:
            from .generated.patched_modeling_f_gpu import F
        return F


    def register_g(architecture: str):
        if IS_NPU_AVAILABLE or IS_MLU_AVAILABLE:  # an MLU host is neither an Ascend nor a CUDA one
            from .generated.patched_modeling_g_npu import G
        else:
            from .generated.patched_modeling_g_gpu import G
        return G
    """
    assert _lines(source, "NPU233", "veomni/models/transformers/a/__init__.py") == []


def test_inverted_switch_left_to_npu508() -> None:
    source = """
    from veomni.utils.device import IS_NPU_AVAILABLE


    def register_a(architecture: str):
        if not IS_NPU_AVAILABLE:
            from .generated.patched_modeling_a_npu import A
        else:
            from .generated.patched_modeling_a_gpu import A
        return A
    """
    path = "veomni/models/transformers/a/__init__.py"
    assert _lines(source, "NPU233", path) == []
    assert _lines(source, "NPU508", path) == [5]


# -- NPU222: the tree's resolver keeps the NPU name ------------------------------------------------------------


def test_resolver_sending_npu_to_eager_unless_npu_as_in_ops_config() -> None:
    source = """
    from veomni.ops.config.registry import get_ops_config


    def implementation_for(field: str, npu_as: str | None = None) -> str:
        cfg = get_ops_config()
        name = getattr(cfg, field, "eager") if cfg is not None else "eager"
        if name == "npu":
            return npu_as if npu_as else "eager"
        return name
    """
    assert _lines(source, "NPU222", "veomni/ops/config/resolve.py") == [7]


def test_kernel_resolver_whose_npu_as_defaults_to_eager() -> None:
    source = """
    from veomni.ops.config import get_ops_config


    def resolve_kernel_impl(field: str, *, npu_as: str = "eager") -> str:
        cfg = get_ops_config()
        impl = "eager" if cfg is None else getattr(cfg, field, "eager")
        if impl == "npu":
            return npu_as
        return impl
    """
    assert _lines(source, "NPU222", "veomni/models_kernel/utils/kernel_utils.py") == [7]


def test_opslot_binder_translating_names_through_a_table() -> None:
    source = """
    _LEGACY_NAMES = {"liger": "liger_kernel", "npu": "eager"}


    class OpSlot:
        def bind(self, ops_config):
            impl = getattr(ops_config, f"{self.op_name}_implementation", "eager")
            impl = _LEGACY_NAMES.get(impl, impl)
            self._kernel = self._registry.resolve(self.op_name, self.variant, impl)
    """
    assert _lines(source, "NPU222", "veomni/ops/dispatch.py") == [7]


def test_trainer_rewriting_the_npu_name() -> None:
    source = """
    def build_ops_overrides(ops_config):
        overrides = {}
        for field in ("rms_norm_implementation", "rotary_pos_emb_implementation"):
            value = getattr(ops_config, field)
            overrides[field] = value.replace("npu", "eager")
        return overrides
    """
    assert _lines(source, "NPU222", "veomni/trainer/ops_setup.py") == [5]


def test_moe_resolver_sending_fused_npu_to_eager_by_suffix() -> None:
    source = """
    from veomni.models_kernel.utils.op_utils import resolve_op_impl


    def resolve_moe_impl() -> str:
        impl = resolve_op_impl("moe_implementation")
        if impl.endswith("_npu"):
            impl = "eager"
        return impl
    """
    assert _lines(source, "NPU222", "veomni/models_kernel/utils/moe_utils.py") == [6]


def test_resolvers_keeping_the_npu_name_are_quiet() -> None:
    source = """
    from veomni.ops.config import get_ops_config

    _ALIASES = {"liger": "liger_kernel", "fused": "fused_triton"}


    def resolve_op_impl(field: str, *, npu_as: str | None = None) -> str:
        cfg = get_ops_config()
        impl = "eager" if cfg is None else getattr(cfg, field, "eager")
        if npu_as is not None and impl == "npu":
            return npu_as
        return _ALIASES.get(impl, impl)


    def resolve_ce_impl(field: str, npu_as: str | None = None) -> str:
        impl = resolve_op_impl(field)
        if impl == "npu" and npu_as is not None:
            return npu_as
        return impl


    def legacy(ops_config) -> str:
        return ops_config.moe_implementation.replace("npu_fused", "fused_npu")
    """
    assert _lines(source, "NPU222", "veomni/models_kernel/utils/op_utils.py") == []


# -- NPU219: `npu_as` read, but not where the NPU name is ------------------------------------------------------


def test_resolver_applying_npu_as_to_the_eager_name() -> None:
    source = """
    from veomni.ops.config import get_ops_config


    def resolve_op_impl(field: str, *, npu_as: str | None = None) -> str:
        cfg = get_ops_config()
        impl = "eager" if cfg is None else getattr(cfg, field, "eager")
        if npu_as is not None and impl == "eager":
            return npu_as
        return impl
    """
    assert _lines(source, "NPU219", "veomni/models_kernel/utils/op_utils.py") == [9]


def test_kernel_resolver_applying_npu_as_to_a_gpu_name() -> None:
    source = """
    from veomni.ops.config import get_ops_config


    def resolve_kernel_impl(field, npu_as=None):
        config = get_ops_config()
        if config is None:
            return "eager"
        value = getattr(config, field, "eager")
        if value == "liger_kernel" and npu_as is not None:
            return npu_as
        return value
    """
    assert _lines(source, "NPU219", "veomni/models_kernel/utils/kernel_utils.py") == [11]


def test_config_reader_in_the_ops_package_remapping_nothing_on_npu() -> None:
    source = """
    def implementation(ops_config, field, *, npu_as=None):
        impl = getattr(ops_config, field)
        if impl == "triton" and npu_as:
            return npu_as
        return impl
    """
    assert _lines(source, "NPU219", "veomni/ops/config/singleton.py") == [5]


def test_resolvers_remapping_the_npu_name_are_quiet() -> None:
    source = """
    from veomni.ops.config import get_ops_config


    def resolve_op_impl(field: str, *, npu_as: str | None = None) -> str:
        cfg = get_ops_config()
        impl = "eager" if cfg is None else getattr(cfg, field, "eager")
        if npu_as is not None and impl == "npu":
            return npu_as
        return impl


    def resolve_kernel_impl(field, npu_as=None):
        impl = getattr(get_ops_config(), field, "eager")
        if impl == "npu" and npu_as:
            impl = npu_as
        return impl
    """
    assert _lines(source, "NPU219", "veomni/models_kernel/utils/op_utils.py") == []
