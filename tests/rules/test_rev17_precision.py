"""Precision fixes after review rev16b: the correct variants the reviewer wrote must stay quiet, the rules' true
positives (and transfer variants in other regions, with other names) must keep reporting."""

from __future__ import annotations

import textwrap

import pytest

from tests.rules.snippets import lint_snippet

# -- NPU237: only device-neutral wiring applied in one device branch ---------------------------------------------
_SWITCH = """
from ....utils.device import IS_NPU_AVAILABLE
import warnings


def register(arch):
    if IS_NPU_AVAILABLE:
        from .generated import patched_modeling_m_npu as gen
{npu}
    else:
        from .generated import patched_modeling_m_gpu as gen
{gpu}
    return gen.MForCausalLM
"""


def _switch(npu: str = "", gpu: str = "") -> str:
    return _SWITCH.format(npu=textwrap.indent(npu, " " * 8), gpu=textwrap.indent(gpu, " " * 8))


_QUIET_237 = [
    _switch(npu='logger.info_rank0("using NPU modeling %s", gen.__name__)'),
    _switch(npu="gen.npu_fused_ops_enable(True)"),
    _switch(npu='assert hasattr(gen, "MForCausalLM"), gen.__file__'),
    _switch(
        gpu='if not hasattr(gen, "flash_attn_varlen_func"):\n    warnings.warn(f"{gen.__name__} no flash-attn")'
    ),
    _switch(npu="gen.MForCausalLM._supports_flex_attn = False"),
    _switch(gpu="gen.install_cuda_graphs()"),
    _switch(gpu="gen.MModel.apply_rotary = staticmethod(liger_rope)"),
    _switch(npu='gen.MForCausalLM._no_split_modules = ["MDecoderLayer"]'),
    _switch(gpu="enable_triton_kernels(gen)"),
    _switch(npu="print(gen.__name__)"),
]


@pytest.mark.parametrize(
    "path", ["veomni/models/transformers/m/__init__.py", "veomni/models/seed_omni/m/__init__.py"]
)
@pytest.mark.parametrize("text", _QUIET_237)
def test_npu237_one_sided_legitimately(path: str, text: str) -> None:
    assert lint_snippet(path, text, ["NPU237"]) == []


_REPORTS_237 = [
    ("veomni/models/transformers/m/__init__.py", _switch(gpu="attach_lora_hooks(gen.MForCausalLM)")),
    (
        "veomni/models/seed_omni/m/__init__.py",
        _switch(npu="gen.MModel._checkpoint_converter = build_converter()"),
    ),
    ("veomni/models/diffusers/m/__init__.py", _switch(gpu="gen.register_hooks()")),
    ("veomni/models/transformers/m/__init__.py", _switch(npu='patch_model_module(gen, "m")')),
    (
        "veomni/models/transformers/m/__init__.py",
        _switch(gpu="gen.MModel.forward = wrap_forward(gen.MModel.forward)"),
    ),
]


@pytest.mark.parametrize("path,text", _REPORTS_237)
def test_npu237_still_reports_neutral_wiring(path: str, text: str) -> None:
    assert [d.code for d in lint_snippet(path, text, ["NPU237"])] == ["NPU237"]
