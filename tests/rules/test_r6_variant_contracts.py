"""Round-6 variant contracts: an RMSNorm handle's weight contract matches its calls (NPU430) and a rotary
handle's variant matches the eager rotary next to it (NPU214). Own models, names and shapes (patch specs with
post-import blocks, local handles, torch.split)."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source


def _lint(path: str, code: str, rule: str) -> list:
    return lint_source(SourceFile.from_text(path, textwrap.dedent(code).lstrip()), [rule], Settings())


_SPEC = '''
from veomni.patchgen import PatchConfig

config = PatchConfig(source_module="transformers.models.toy.modeling_toy", target_file="patched_modeling_toy_npu.py")

config.add_post_import_block(
    """
    from veomni.ops.dispatch import OpSlot

    veomni_bare_norm = OpSlot("rms_norm", "{variant}")
    """
)


@config.override_method("ToyBareNorm.forward")
def toy_bare_norm_forward_patched(self, x):
    if veomni_bare_norm.use_non_eager_impl:
        return veomni_bare_norm(x, weight={weight}, eps=self.eps)
    return x * (x.float().pow(2).mean(-1, keepdim=True) + self.eps).rsqrt().to(x.dtype)
'''

_SPEC_PATH = "veomni/models/transformers/toy/toy_npu_patch_gen_config.py"


def test_weighted_slot_called_without_a_weight_in_a_spec_block() -> None:
    diags = _lint(_SPEC_PATH, _SPEC.format(variant="standard", weight="None"), "NPU430")
    assert len(diags) == 1 and diags[0].line == 9  # the slot's line inside the post-import block
    assert '"unweighted"' in diags[0].message and "`veomni_bare_norm`" in diags[0].message


def test_unweighted_slot_given_a_weight_in_a_spec_block() -> None:
    diags = _lint(_SPEC_PATH, _SPEC.format(variant="unweighted", weight="self.weight"), "NPU430")
    assert len(diags) == 1 and "`self.weight`" in diags[0].message


def test_matching_weight_contracts_are_quiet() -> None:
    assert _lint(_SPEC_PATH, _SPEC.format(variant="unweighted", weight="None"), "NPU430") == []
    assert _lint(_SPEC_PATH, _SPEC.format(variant="standard", weight="self.weight"), "NPU430") == []


_ROPE = """
import torch
from veomni.ops import VeomniOp
from veomni.models_kernel.utils.op_utils import resolve_op_impl


def apply_glm_rotary(q, k, cos, sin):
    impl = resolve_op_impl("rotary_pos_emb_implementation")
    if impl != "eager":
        kernel = VeomniOp("rope", "{variant}", impl)
        return kernel(q, k, cos, sin)
    rot = cos.shape[-1]
    q_rot, q_pass = torch.split(q, [rot, q.shape[-1] - rot], dim=-1)
    k_rot, k_pass = torch.split(k, [rot, k.shape[-1] - rot], dim=-1)
    return torch.cat([q_rot * cos, q_pass], dim=-1), torch.cat([k_rot * cos, k_pass], dim=-1)
"""

_ROPE_PATH = "veomni/models_kernel/transformers/toy/generated/patched_modeling_toy_gpu.py"


def test_full_local_rope_handle_in_a_split_rotary_is_reported() -> None:
    diags = _lint(_ROPE_PATH, _ROPE.format(variant="full"), "NPU214")
    assert len(diags) == 1 and diags[0].line == 9
    assert "`rot`" in diags[0].message and '"partial"' in diags[0].message


def test_partial_local_rope_handle_in_a_split_rotary_is_quiet() -> None:
    assert _lint(_ROPE_PATH, _ROPE.format(variant="partial"), "NPU214") == []


_MLA_SPEC = """
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3RMSNorm
from veomni.patchgen import PatchConfig

config = PatchConfig(source_module="transformers.models.deepseek_v3.modeling_deepseek_v3", target_file="x.py")


@config.override_method("DeepseekV3Attention.__init__")
def deepseek_v3_attention_init_patched(self, config, layer_idx):
    super().__init__()
    self.q_a_layernorm = DeepseekV3RMSNorm(config.q_lora_rank{q_eps})
    self.kv_a_layernorm = DeepseekV3RMSNorm(self.kv_lora_rank)
"""

_MLA_PATH = "veomni/models/transformers/deepseek_v3/deepseek_v3_gpu_patch_gen_config.py"


def test_mla_norm_given_the_decoder_eps_where_upstream_uses_the_class_default() -> None:
    diags = _lint(_MLA_PATH, _MLA_SPEC.format(q_eps=", getattr(config, 'rms_norm_eps', 1e-6)"), "NPU431")
    assert len(diags) == 1 and diags[0].line == 10
    assert "`self.q_a_layernorm`" in diags[0].message and "class default (1e-06)" in diags[0].message


def test_mla_norm_spelling_out_the_class_default_is_quiet() -> None:
    assert _lint(_MLA_PATH, _MLA_SPEC.format(q_eps=", eps=1e-6"), "NPU431") == []
    assert _lint(_MLA_PATH, _MLA_SPEC.format(q_eps=""), "NPU431") == []


_QWEN2_COPY = """
# Source: transformers.models.qwen2.modeling_qwen2
import torch
from torch import nn


class Qwen2RMSNorm(nn.Module):
    def __init__(self, hidden_size, *, eps={eps}):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps
"""


def test_generated_norm_class_default_eps_differs_from_upstream() -> None:
    path = "veomni/models/transformers/qwen2/generated/patched_modeling_qwen2_gpu.py"
    diags = _lint(path, _QWEN2_COPY.format(eps="1e-5"), "NPU431")
    assert len(diags) == 1 and "1e-06" in diags[0].message
    assert _lint(path, _QWEN2_COPY.format(eps="0.000001"), "NPU431") == []
