"""NPU732: every model type of a VLM registered under its own key. Transfer variants of the dev misses that NPU503
used to report (round 17: `qwen3_5_text` unregistered; round 14: the text loader re-keyed to the wrapper's type):
other models (Qwen3-VL, a toy omni model without transformers source), other spellings of registration (a call at
import time, a subscript, a loop), and the correct variants that stay quiet. NPU503 reports none of them (one model
type, one rule)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from npu_lint.rules.base import PROJECT_REGISTRY, load_rule_modules

load_rule_modules()

GENERATED_QWEN3_VL = """
# AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
# Source: transformers.models.qwen3_vl.modeling_qwen3_vl
# Based on: transformers==5.9.0
from torch import nn


class Qwen3VLTextModel(nn.Module):
    config: Qwen3VLTextConfig


class Qwen3VLForCausalLM(nn.Module):
    config: Qwen3VLTextConfig


class Qwen3VLModel(nn.Module):
    config: Qwen3VLConfig


class Qwen3VLForConditionalGeneration(nn.Module):
    config: Qwen3VLConfig
"""

# no transformers source for `toy_omni`: VeOmni's `<m>` / `<m>_text` convention stands in
GENERATED_TOY_OMNI = """
# AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
# Source: transformers.models.toy_omni.modeling_toy_omni
from torch import nn


class ToyOmniForCausalLM(nn.Module):
    config: ToyOmniTextConfig


class ToyOmniForConditionalGeneration(nn.Module):
    config: ToyOmniConfig
"""


def _findings(
    tmp_path: Path, model: str, generated: str, init: str, code: str = "NPU732"
) -> list[tuple[int, str]]:
    pkg = tmp_path / "veomni" / "models" / "transformers" / model
    (pkg / "generated").mkdir(parents=True, exist_ok=True)
    (pkg / "generated" / f"patched_modeling_{model}_gpu.py").write_text(
        textwrap.dedent(generated).lstrip("\n")
    )
    (pkg / "__init__.py").write_text(textwrap.dedent(init).lstrip("\n"))
    init_path = str(pkg / "__init__.py")
    rule = PROJECT_REGISTRY[code]()
    return sorted((d.line, d.message) for d in rule.check(None, [init_path]) if d.path == init_path)  # type: ignore[arg-type]


QWEN3_VL_TEXT_UNDER_WRAPPER = """
from ...loader import MODELING_REGISTRY


@MODELING_REGISTRY.register("qwen3_vl")
def register_qwen3_vl_text_modeling(architecture: str):
    from .generated.patched_modeling_qwen3_vl_gpu import Qwen3VLForCausalLM, Qwen3VLTextModel

    if "TextModel" in architecture:
        return Qwen3VLTextModel
    return Qwen3VLForCausalLM
"""


def test_text_loader_keyed_by_the_wrapper_type(tmp_path: Path) -> None:
    found = _findings(tmp_path, "qwen3_vl", GENERATED_QWEN3_VL, QWEN3_VL_TEXT_UNDER_WRAPPER)
    lines = [line for line, _ in found]
    assert 9 in lines and 10 in lines, (
        found
    )  # both returns: each builds a text class for a `qwen3_vl` checkpoint
    assert any("`qwen3_vl_text` itself is registered nowhere" in m for _, m in found), found
    assert _findings(tmp_path, "qwen3_vl", GENERATED_QWEN3_VL, QWEN3_VL_TEXT_UNDER_WRAPPER, "NPU503") == []


def test_text_loader_keyed_correctly_and_mixed_dispatch_stay_quiet(tmp_path: Path) -> None:
    good = QWEN3_VL_TEXT_UNDER_WRAPPER.replace('register("qwen3_vl")', 'register("qwen3_vl_text")') + (
        """

@MODELING_REGISTRY.register("qwen3_vl")
def register_qwen3_vl_modeling(architecture: str):
    from .generated.patched_modeling_qwen3_vl_gpu import Qwen3VLForConditionalGeneration, Qwen3VLModel

    if "ForConditionalGeneration" in architecture:
        return Qwen3VLForConditionalGeneration
    return Qwen3VLModel
"""
    )
    assert _findings(tmp_path, "qwen3_vl", GENERATED_QWEN3_VL, good) == []
    # one loader for both types, dispatching by architecture: some branches return the wrapper
    both = """
    from ...loader import MODELING_REGISTRY


    @MODELING_REGISTRY.register("qwen3_vl")
    @MODELING_REGISTRY.register("qwen3_vl_text")
    def register_qwen3_vl(architecture: str):
        from .generated.patched_modeling_qwen3_vl_gpu import Qwen3VLForCausalLM, Qwen3VLForConditionalGeneration

        if "ForCausalLM" in architecture:
            return Qwen3VLForCausalLM
        return Qwen3VLForConditionalGeneration
    """
    assert _findings(tmp_path, "qwen3_vl", GENERATED_QWEN3_VL, both) == []


def test_text_type_dropped_from_an_import_time_registration(tmp_path: Path) -> None:
    init = """
    from ...loader import MODELING_REGISTRY


    def load_toy_omni(architecture: str):
        from .generated.patched_modeling_toy_omni_gpu import ToyOmniForCausalLM, ToyOmniForConditionalGeneration

        if "ForCausalLM" in architecture:
            return ToyOmniForCausalLM
        return ToyOmniForConditionalGeneration


    for model_type in TYPES:
        MODELING_REGISTRY[model_type] = load_toy_omni
    """
    bad = _findings(tmp_path, "toy_omni", GENERATED_TOY_OMNI, init.replace("TYPES", '("toy_omni",)'))
    assert len(bad) == 1 and "`toy_omni_text`" in bad[0][1], bad
    good = init.replace("TYPES", '("toy_omni", "toy_omni_text")')
    assert _findings(tmp_path, "toy_omni", GENERATED_TOY_OMNI, good) == []


def test_wrapper_type_missing_with_an_unregistered_helper(tmp_path: Path) -> None:
    init = """
    from ...loader import MODELING_REGISTRY


    def build_qwen3_vl(architecture: str):
        from .generated.patched_modeling_qwen3_vl_gpu import Qwen3VLForConditionalGeneration

        return Qwen3VLForConditionalGeneration


    @MODELING_REGISTRY.register("qwen3_vl_text")
    def register_qwen3_vl_text(architecture: str):
        from .generated.patched_modeling_qwen3_vl_gpu import Qwen3VLForCausalLM

        return Qwen3VLForCausalLM
    """
    found = _findings(tmp_path, "qwen3_vl", GENERATED_QWEN3_VL, init)
    assert [line for line, _ in found] == [4], found  # at the helper that loads the wrapper
    assert "multimodal model type `qwen3_vl`" in found[0][1] and "`build_qwen3_vl` loads it" in found[0][1]
