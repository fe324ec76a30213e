"""Review 21 (precision): correct variants of NPU731, NPU732, NPU233 and NPU219 that a maintainer would write and
that the rules reported, each paired with a still-reported true positive of the same shape."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from npu_lint.veomni.selection import cuda_probe, device_probe
from tests.rules.snippets import lint_snippet
from tests.rules.test_npu732_vlm_model_types import GENERATED_TOY_OMNI, _findings

OMNI = "veomni/models/seed_omni/toy_omni/modeling.py"


def _codes(path: str, text: str, code: str) -> list[int]:
    return [d.line for d in lint_snippet(path, text, [code])]


# --- NPU731 ---------------------------------------------------------------------------------------------------

NON_NONE_DEFAULT = """
class Toy:
    def get_rope_index(self, input_ids, image_grid_thw=None, video_grid_thw=None, merge_sizes={default}):
        return image_grid_thw[0] // merge_sizes[0]

    def forward(self, input_ids, image_grid_thw):
        return self.get_rope_index(input_ids, image_grid_thw)
"""


def test_npu731_quiet_on_a_value_default() -> None:
    # `merge_sizes=(2, 2)` is a value, not an unset parameter: leaving it out is fine
    assert _codes(OMNI, NON_NONE_DEFAULT.format(default="(2, 2)"), "NPU731") == []
    assert _codes(OMNI, NON_NONE_DEFAULT.format(default="None"), "NPU731") == [6]


IS_TENSOR_GUARD = """
import torch


class Toy:
    def get_rope_index(self, input_ids, image_grid_thw=None, video_grid_thw=None, second_per_grids=None):
        out = []
        for i, g in enumerate(video_grid_thw):
            out.append(g[0] * second_per_grids[i] if {guard} else g[0])
        return out

    def forward(self, input_ids, video_grid_thw):
        return self.get_rope_index(input_ids, None, video_grid_thw)
"""


def test_npu731_quiet_on_an_is_tensor_guard() -> None:
    assert _codes(OMNI, IS_TENSOR_GUARD.format(guard="torch.is_tensor(second_per_grids)"), "NPU731") == []
    assert _codes(OMNI, IS_TENSOR_GUARD.format(guard="torch.is_tensor(video_grid_thw)"), "NPU731") == [12]


TWO_CLASSES = """
class ToyVision:
    def get_rope_index(self, input_ids, image_grid_thw=None, video_grid_thw=None):
        return [g[0] for g in video_grid_thw]

    def forward(self, input_ids, video_grid_thw):
        return {vision_call}


class ToyOmni:
    def get_rope_index(self, input_ids, image_grid_thw=None, video_grid_thw=None, audio_seqlens=None):
        return [audio_seqlens[i] for i, g in enumerate(video_grid_thw)]

    def forward(self, input_ids, video_grid_thw):
        return self.get_rope_index(input_ids, None, video_grid_thw)
"""


def test_npu731_self_call_reaches_its_own_class() -> None:
    # `self.get_rope_index` in ToyVision runs ToyVision's definition, not ToyOmni's
    quiet = TWO_CLASSES.format(vision_call="self.get_rope_index(input_ids, None, video_grid_thw)")
    assert _codes(OMNI, quiet, "NPU731") == [14]  # only ToyOmni's own call, which drops `audio_seqlens`
    fixed = quiet.replace(
        "return self.get_rope_index(input_ids, None, video_grid_thw)\n",
        "return self.get_rope_index(input_ids, None, video_grid_thw, audio_seqlens=[])\n",
    )
    assert _codes(OMNI, fixed, "NPU731") == []
    narrowed = TWO_CLASSES.format(vision_call="ToyOmni.get_rope_index(self, input_ids, None, video_grid_thw)")
    assert _codes(OMNI, narrowed, "NPU731") == [6, 14]  # an explicit call of ToyOmni's definition is judged


# --- NPU732 ---------------------------------------------------------------------------------------------------

PARTIAL_REGISTRATION = """
from functools import partial

from ...loader import MODELING_REGISTRY


def _load(architecture: str, text: bool = False):
    from .generated.patched_modeling_toy_omni_gpu import ToyOmniForCausalLM, ToyOmniForConditionalGeneration

    return ToyOmniForCausalLM if text else ToyOmniForConditionalGeneration


MODELING_REGISTRY.register("toy_omni", _load)
"""


def test_npu732_quiet_on_a_partial_registration(tmp_path: Path) -> None:
    text_registered = (
        PARTIAL_REGISTRATION + 'MODELING_REGISTRY.register("toy_omni_text", partial(_load, text=True))\n'
    )
    assert _findings(tmp_path / "a", "toy_omni", GENERATED_TOY_OMNI, text_registered) == []
    assert len(_findings(tmp_path / "b", "toy_omni", GENERATED_TOY_OMNI, PARTIAL_REGISTRATION)) == 1


# --- NPU233 ---------------------------------------------------------------------------------------------------

INIT = "veomni/models/transformers/toy/__init__.py"
BOOL_COMPARED = """
from ....utils.device import IS_NPU_AVAILABLE
from ...loader import MODELING_REGISTRY


@MODELING_REGISTRY.register("toy")
def register_toy_modeling(architecture: str):
    if {test}:
        from .generated.patched_modeling_toy_npu import ToyForCausalLM
    else:
        from .generated.patched_modeling_toy_gpu import ToyForCausalLM
    return ToyForCausalLM
"""


def test_npu233_quiet_on_a_probe_compared_to_true() -> None:
    for test in ("IS_NPU_AVAILABLE is True", "IS_NPU_AVAILABLE == True", "not IS_NPU_AVAILABLE is False"):
        assert _codes(INIT, BOOL_COMPARED.format(test=test), "NPU233") == [], test
    assert _codes(
        INIT, BOOL_COMPARED.format(test='IS_NPU_AVAILABLE is True and "L" in architecture'), "NPU233"
    )


HELPER_PROBE = """
from ....utils.device import IS_NPU_AVAILABLE
from ...loader import MODELING_REGISTRY


def _use_npu_module() -> bool:
    return {probe}


@MODELING_REGISTRY.register("toy")
def register_toy_modeling(architecture: str):
    if _use_npu_module():
        from .generated.patched_modeling_toy_npu import ToyForCausalLM
    else:
        from .generated.patched_modeling_toy_gpu import ToyForCausalLM
    return ToyForCausalLM
"""


def test_npu233_quiet_on_a_helper_returning_the_probe() -> None:
    assert _codes(INIT, HELPER_PROBE.format(probe="IS_NPU_AVAILABLE"), "NPU233") == []
    assert _codes(INIT, HELPER_PROBE.format(probe="IS_NPU_AVAILABLE and FLAG"), "NPU233")


# --- NPU219 ---------------------------------------------------------------------------------------------------

OPS = "veomni/ops/binders.py"
INTERFACE = """
class KernelBinder:
    def bind(self, name: str, npu_impl: str | None = None) -> str:
        raise NotImplementedError


class CudaBinder({base}):
    def bind(self, name: str, npu_impl: str | None = None) -> str:
        return f"cuda:{{name}}"


class NpuBinder(KernelBinder):
    def bind(self, name: str, npu_impl: str | None = None) -> str:
        return f"npu:{{npu_impl or name}}"
"""


def test_npu219_quiet_on_an_interface_implementation() -> None:
    # the GPU implementation of an in-file interface has no use for the NPU parameter the signature carries
    assert _codes(OPS, INTERFACE.format(base="KernelBinder"), "NPU219") == []
    assert _codes(OPS, INTERFACE.format(base="object"), "NPU219") == [8]


@pytest.mark.parametrize(
    ("test", "cuda", "ascend"),
    [
        ("IS_CUDA_AVAILABLE is True", True, False),
        ("torch.cuda.is_available() == False", False, True),
        ("IS_NPU_AVAILABLE is True", None, True),  # an NPU probe compared to a bool is no CUDA probe
        ("IS_NPU_AVAILABLE != True", None, False),
    ],
)
def test_a_probe_compared_to_a_bool_is_read_by_the_probe_it_compares(
    test: str, cuda: bool | None, ascend: bool
) -> None:
    expr = ast.parse(test, mode="eval").body
    assert (cuda_probe(expr), device_probe(expr)) == (cuda, ascend)
