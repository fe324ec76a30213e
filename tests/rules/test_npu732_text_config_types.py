"""NPU732: a package that registers the config of a vision-language model type must make the model type of that
config's text sub-config resolvable too (a config key, a modeling key, here or in a sibling package): a checkpoint
whose config.json names the text type otherwise keeps the stock config and finds no VeOmni model. Transfer variants
of the dev miss (Qwen2.5-VL's `qwen2_5_vl_text` config key dropped) in other models (Gemma 3, Qwen3-VL, a model of
the tree's own with its own configuration module), other spellings of registration (decorators, a call at import
time, a loop over literal types), and correct variants that stay quiet."""

from __future__ import annotations

import textwrap
from pathlib import Path

from npu_lint.rules.base import PROJECT_REGISTRY, load_rule_modules

load_rule_modules()


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))


def _lines(tmp_path: Path, model: str, init: str, region: str = "veomni/models/transformers") -> list[int]:
    pkg = tmp_path / region / model
    _write(pkg / "__init__.py", init)
    init_path = str(pkg / "__init__.py")
    rule = PROJECT_REGISTRY["NPU732"]()
    return sorted(d.line for d in rule.check(None, [init_path]) if d.path == init_path)  # type: ignore[arg-type]


GEMMA3 = """
from ...loader import MODEL_CONFIG_REGISTRY, MODELING_REGISTRY


@MODEL_CONFIG_REGISTRY.register("gemma3")
def register_gemma3_config():
    from transformers.models.gemma3.configuration_gemma3 import Gemma3Config

    return Gemma3Config


@MODELING_REGISTRY.register("gemma3")
def register_gemma3_modeling(architecture: str):
    from transformers.models.gemma3.modeling_gemma3 import Gemma3ForConditionalGeneration

    return Gemma3ForConditionalGeneration
"""


def test_gemma3_config_registered_without_its_text_type(tmp_path: Path) -> None:
    assert _lines(tmp_path, "gemma3", GEMMA3) == [4]


def test_gemma3_text_type_registered_as_modeling_or_config_key_is_quiet(tmp_path: Path) -> None:
    modeling = GEMMA3.replace(
        '@MODELING_REGISTRY.register("gemma3")\n',
        '@MODELING_REGISTRY.register("gemma3")\n@MODELING_REGISTRY.register("gemma3_text")\n',
    )
    assert _lines(tmp_path / "a", "gemma3", modeling) == []
    config = GEMMA3.replace(
        '@MODEL_CONFIG_REGISTRY.register("gemma3")\n',
        '@MODEL_CONFIG_REGISTRY.register("gemma3")\n@MODEL_CONFIG_REGISTRY.register("gemma3_text")\n',
    )
    assert _lines(tmp_path / "b", "gemma3", config) == []


QWEN3_VL = """
from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLConfig

from ...loader import MODEL_CONFIG_REGISTRY, MODELING_REGISTRY


def load_qwen3_vl_config():
    return Qwen3VLConfig


def load_qwen3_vl(architecture: str):
    from .generated import patched_modeling_qwen3_vl_gpu as generated

    return generated.Qwen3VLForConditionalGeneration


MODELING_REGISTRY.register("qwen3_vl", load_qwen3_vl)
REGISTER
"""


def test_qwen3_vl_config_registered_at_import_time_without_its_text_type(tmp_path: Path) -> None:
    text = QWEN3_VL.replace("REGISTER", 'MODEL_CONFIG_REGISTRY.register("qwen3_vl")(load_qwen3_vl_config)')
    assert _lines(tmp_path, "qwen3_vl", text) == [17]  # the registration statement


def test_qwen3_vl_config_registered_in_a_loop_over_both_types_is_quiet(tmp_path: Path) -> None:
    text = QWEN3_VL.replace(
        "REGISTER",
        'for model_type in ("qwen3_vl", "qwen3_vl_text"):\n    MODEL_CONFIG_REGISTRY.register(model_type)(load_qwen3_vl_config)',
    )
    assert _lines(tmp_path, "qwen3_vl", text) == []


OWN_CONFIG = """
from transformers import PretrainedConfig


class ToyVlmTextConfig(PretrainedConfig):
    model_type = "toy_vlm_text"


class ToyVlmVisionConfig(PretrainedConfig):
    model_type = "toy_vlm_vision"


class ToyVlmConfig(PretrainedConfig):
    model_type = "toy_vlm"
    sub_configs = {"vision_config": ToyVlmVisionConfig, "text_config": ToyVlmTextConfig}
"""

OWN_INIT = """
from ....loader import MODEL_CONFIG_REGISTRY, MODELING_REGISTRY
from .configuration_toy_vlm import ToyVlmConfig


@MODEL_CONFIG_REGISTRY.register("toy_vlm")
def register_toy_vlm_config():
    return ToyVlmConfig


@MODELING_REGISTRY.register("toy_vlm")
def register_toy_vlm_modeling(architecture: str):
    from .modeling_toy_vlm import ToyVlmForConditionalGeneration

    return ToyVlmForConditionalGeneration
"""


def test_config_of_the_trees_own_configuration_module(tmp_path: Path) -> None:
    region = "veomni/models/seed_omni/foundation"
    _write(tmp_path / region / "toy_vlm" / "configuration_toy_vlm.py", OWN_CONFIG)
    assert _lines(tmp_path, "toy_vlm", OWN_INIT, region) == [5]


def test_text_type_registered_by_a_sibling_package_is_quiet(tmp_path: Path) -> None:
    region = "veomni/models/seed_omni/foundation"
    _write(tmp_path / region / "toy_vlm" / "configuration_toy_vlm.py", OWN_CONFIG)
    _write(
        tmp_path / region / "toy_vlm_text" / "__init__.py",
        """
        from ....loader import MODELING_REGISTRY


        @MODELING_REGISTRY.register("toy_vlm_text")
        def register_toy_vlm_text_modeling(architecture: str):
            from .modeling_toy_vlm_text import ToyVlmTextForCausalLM

            return ToyVlmTextForCausalLM
        """,
    )
    assert _lines(tmp_path, "toy_vlm", OWN_INIT, region) == []


def test_configs_without_a_named_text_sub_config_are_quiet(tmp_path: Path) -> None:
    # an omni config (its sub-configs are thinker / talker / token2wav, no `text_config`)
    omni = """
    from ...loader import MODEL_CONFIG_REGISTRY


    @MODEL_CONFIG_REGISTRY.register("qwen2_5_omni")
    def register_qwen2_5_omni_config():
        from transformers.models.qwen2_5_omni.configuration_qwen2_5_omni import Qwen2_5OmniConfig

        return Qwen2_5OmniConfig
    """
    assert _lines(tmp_path / "a", "qwen2_5_omni", omni) == []
    # a generic text sub-config (`AutoConfig`), and a text sub-config of an unrelated model type
    generic = OWN_CONFIG.replace('"text_config": ToyVlmTextConfig', '"text_config": AutoConfig')
    _write(tmp_path / "b" / "veomni/models/transformers/toy_vlm/configuration_toy_vlm.py", generic)
    assert _lines(tmp_path / "b", "toy_vlm", OWN_INIT.replace("....loader", "...loader")) == []
    unrelated = OWN_CONFIG.replace('model_type = "toy_vlm_text"', 'model_type = "llama"')
    _write(tmp_path / "c" / "veomni/models/transformers/toy_vlm/configuration_toy_vlm.py", unrelated)
    assert _lines(tmp_path / "c", "toy_vlm", OWN_INIT.replace("....loader", "...loader")) == []
    # a text-only model's config (no sub-configs at all)
    text_only = """
    from ...loader import MODEL_CONFIG_REGISTRY


    @MODEL_CONFIG_REGISTRY.register("qwen3")
    def register_qwen3_config():
        from transformers.models.qwen3.configuration_qwen3 import Qwen3Config

        return Qwen3Config
    """
    assert _lines(tmp_path / "d", "qwen3", text_only) == []


def test_qwen2_5_vl_config_registered_by_subscript(tmp_path: Path) -> None:
    init = """
    from ...loader import MODEL_CONFIG_REGISTRY


    def qwen2_5_vl_config():
        from transformers.models.qwen2_5_vl.configuration_qwen2_5_vl import Qwen2_5_VLConfig as VLConfig

        return VLConfig


    MODEL_CONFIG_REGISTRY["qwen2_5_vl"] = qwen2_5_vl_config
    """
    assert _lines(tmp_path / "a", "qwen2_5vl", init) == [10]
    both = init + '    MODEL_CONFIG_REGISTRY["qwen2_5_vl_text"] = qwen2_5_vl_config\n'
    assert _lines(tmp_path / "b", "qwen2_5vl", both) == []
