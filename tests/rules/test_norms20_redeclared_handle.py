"""A dispatch handle declared twice in one body (a generated file re-declaring a module slot, an ``__init__``
re-binding ``self.<attr>``, a post-import block): the calls see the last straight-line binding, so the RMSNorm
variant rules (NPU402 standard for a zero-centred norm, NPU403 offset for a ones-initialised one) judge that one,
in either dispatch generation (OpSlot, VeomniOp) and any region; bindings under a branch stay ambiguous (quiet),
and a last binding of the right variant is quiet."""

from __future__ import annotations

import pytest

from tests.rules.snippets import lint_snippet

ZERO_CLASS = """
class {cls}(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.{w} = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        if {slot}.use_non_eager_impl:
            return {slot}(x, self.{w}, self.eps)
        out = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return (out * (1.0 + self.{w}.float())).type_as(x)
"""

ONES_CLASS = """
class {cls}(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.{w} = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        if {slot}.use_non_eager_impl:
            return {slot}(x, self.{w}, self.eps)
        out = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.{w} * out).type_as(x)
"""

HEAD = "import torch\nfrom torch import nn\nfrom veomni.ops.dispatch import OpSlot\n\n"


def _module_slots(slot: str, first: str, last: str, between: str = "") -> str:
    return (
        f'{slot} = OpSlot("rms_norm", "{first}")\n'
        f'veomni_rotary = OpSlot("rotary_pos_emb", "standard")\n{between}'
        f'{slot} = OpSlot("rms_norm", "{last}")\n'
    )


# (path, class, weight attribute, slot name): other models, regions and names than the round-19 case
SITES = [
    (
        "veomni/models/transformers/qwen3_5_moe/generated/patched_modeling_qwen3_5_moe_npu.py",
        "Qwen3_5MoeRMSNorm",
        "weight",
        "veomni_rms_norm",
    ),
    (
        "veomni/models/transformers/qwen3_next/generated/patched_modeling_qwen3_next_gpu.py",
        "Qwen3NextRMSNorm",
        "weight",
        "veomni_norm_slot",
    ),
    ("veomni/models/diffusers/toy_dit/modeling_toy_dit.py", "DitGemmaNorm", "scale", "dit_rms"),
    ("veomni/ops/kernels/rms_norm/gemma_wrapper.py", "GemmaStyleRMSNorm", "gamma", "rms_slot"),
]


def _codes(path: str, text: str) -> list[tuple[str, int]]:
    return [(d.code, d.line) for d in lint_snippet(path, text, ["NPU402", "NPU403"])]


@pytest.mark.parametrize(("path", "cls", "w", "slot"), SITES)
def test_zero_centred_norm_redeclared_standard_is_reported_at_the_last_declaration(path, cls, w, slot):
    text = HEAD + _module_slots(slot, "qwen3_5", "standard") + ZERO_CLASS.format(cls=cls, w=w, slot=slot)
    assert _codes(path, text) == [("NPU402", 7)]


@pytest.mark.parametrize(("path", "cls", "w", "slot"), SITES)
def test_ones_norm_redeclared_offset_is_reported(path, cls, w, slot):
    text = HEAD + _module_slots(slot, "standard", "qwen3_5") + ONES_CLASS.format(cls=cls, w=w, slot=slot)
    assert [c for c, _ in _codes(path, text)] == ["NPU403"]


@pytest.mark.parametrize(("path", "cls", "w", "slot"), SITES)
def test_last_declaration_right_is_quiet(path, cls, w, slot):
    zero = HEAD + _module_slots(slot, "standard", "qwen3_5") + ZERO_CLASS.format(cls=cls, w=w, slot=slot)
    ones = HEAD + _module_slots(slot, "qwen3_5", "standard") + ONES_CLASS.format(cls=cls, w=w, slot=slot)
    assert _codes(path, zero) == []
    assert _codes(path, ones) == []


@pytest.mark.parametrize(("path", "cls", "w", "slot"), SITES)
def test_declarations_under_a_branch_are_alternatives_and_quiet(path, cls, w, slot):
    branch = (
        f'if IS_NPU_AVAILABLE:\n    {slot} = OpSlot("rms_norm", "standard")\n'
        f'else:\n    {slot} = OpSlot("rms_norm", "qwen3_5")\n'
    )
    text = HEAD + "IS_NPU_AVAILABLE = True\n" + branch + ZERO_CLASS.format(cls=cls, w=w, slot=slot)
    assert _codes(path, text) == []


VEOMNI_OP = """
import torch
from torch import nn
from veomni.ops import VeomniOp


class {cls}(nn.Module):
    def __init__(self, dim, impl, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.{w} = nn.Parameter(torch.{init}(dim))
        self.{attr} = VeomniOp("rms_norm", "{first}", impl)
        self.{attr} = VeomniOp("rms_norm", "{last}", impl)

    def forward(self, x):
        return self.{attr}(x, self.{w}, eps=self.eps)
"""

OP_SITES = [
    ("veomni/models_kernel/transformers/qwen3_5/generated/patched_modeling_qwen3_5_npu.py", "Qwen3_5RMSNorm"),
    ("veomni/models_kernel/transformers/gemma3/modeling_gemma3.py", "Gemma3RMSNorm"),
    ("veomni/models_kernel/seed_omni/decoder/toy/modeling_toy.py", "ToyZeroNorm"),
]


@pytest.mark.parametrize(("path", "cls"), OP_SITES)
def test_veomni_op_attribute_rebound_in_init(path, cls):
    def run(init: str, first: str, last: str) -> list[str]:
        text = VEOMNI_OP.format(cls=cls, w="weight", attr="kernel", init=init, first=first, last=last)
        return [c for c, _ in _codes(path, text)]

    assert run("zeros", "offset", "standard") == ["NPU402"]
    assert run("ones", "standard", "offset") == ["NPU403"]
    assert run("zeros", "standard", "offset") == []
    assert run("ones", "offset", "standard") == []


SPEC = '''
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.qwen3.modeling_qwen3", target_file="x.py")
config.add_post_import_block(
    """
    from veomni.ops.dispatch import OpSlot
    veomni_rms_norm = OpSlot("rms_norm", "{first}")
    veomni_rms_norm = OpSlot("rms_norm", "{last}")
    """
)


@config.override_method("Qwen3RMSNorm.forward")
def qwen3_rmsnorm_forward_patched(self, hidden_states):
    if veomni_rms_norm.use_non_eager_impl:
        return veomni_rms_norm(hidden_states, self.weight, self.variance_epsilon)
    return hidden_states
'''


def test_post_import_block_redeclaration_in_a_spec():
    path = "veomni/models/transformers/qwen3/qwen3_npu_patch_gen_config.py"
    assert [c for c, _ in _codes(path, SPEC.format(first="standard", last="qwen3_5"))] == ["NPU403"]
    assert _codes(path, SPEC.format(first="qwen3_5", last="standard")) == []


# -- NPU430: one handle of a weighted variant shared by a weighted norm and a weight-less one -------------------
SHARED = """
import torch
from torch import nn
from veomni.ops.dispatch import OpSlot

{slot} = OpSlot("rms_norm", "{variant}")


class {weighted}(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return {slot}(x, self.weight, self.eps)


class {plain}(nn.Module):
    def __init__(self, eps=1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        return {slot}(x, None, self.eps)
"""

SHARED_SITES = [
    ("veomni/models/transformers/deepseek_v4/generated/patched_modeling_deepseek_v4_gpu.py", "veomni_norm"),
    ("veomni/models/diffusers/wan/modeling_wan_norms.py", "dit_norm_slot"),
    ("veomni/ops/kernels/rms_norm/mixed_wrappers.py", "_rms"),
]


def _npu430(path: str, text: str) -> list[int]:
    return [d.line for d in lint_snippet(path, text, ["NPU430"])]


@pytest.mark.parametrize(("path", "slot"), SHARED_SITES)
def test_the_odd_call_of_a_shared_handle_is_reported_at_the_call(path, slot):
    text = SHARED.format(slot=slot, variant="standard", weighted="QNormA", plain="IndexerNorm")
    assert _npu430(path, text) == [24]  # the weight-less call, not the declaration the weighted norm needs
    text = SHARED.format(slot=slot, variant="unweighted", weighted="QNormA", plain="IndexerNorm")
    assert _npu430(path, text) == [15]  # the weighted call of the unweighted handle


@pytest.mark.parametrize(("path", "slot"), SHARED_SITES)
def test_every_call_contradicting_the_variant_is_reported_once_at_the_declaration(path, slot):
    text = SHARED.format(slot=slot, variant="standard", weighted="QNormA", plain="IndexerNorm")
    text = text.replace("(x, self.weight, self.eps)", "(x, None, self.eps)")
    assert _npu430(path, text) == [5]


@pytest.mark.parametrize(("path", "slot"), SHARED_SITES)
def test_a_handle_per_contract_is_quiet(path, slot):
    text = SHARED.format(slot=slot, variant="standard", weighted="QNormA", plain="IndexerNorm")
    text = text.replace(f"        return {slot}(x, None", f"        return {slot}_plain(x, None")
    text = text.replace(
        "\n\nclass QNormA", f'{slot}_plain = OpSlot("rms_norm", "unweighted")\n\n\nclass QNormA', 1
    )
    assert _npu430(path, text) == []
