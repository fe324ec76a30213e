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


_GATED = """
import torch
import torch_npu


class ToyMixerNormGated(torch.nn.Module):
    def forward(self, states, gate_proj):
        states = torch_npu.npu_rms_norm(states, self.weight, self.eps)[0]
        packed = torch.cat([{first}, {second}], dim=-1)
        return torch_npu.npu_swiglu(packed, dim=-1)
"""


def test_fused_swiglu_through_a_local_binding_with_the_gate_second() -> None:
    path = "veomni/ops/kernels/toy_mixer/npu.py"
    diags = _lint(path, _GATED.format(first="states", second="gate_proj"), "NPU432")
    assert len(diags) == 1 and diags[0].line == 8 and "`gate_proj`" in diags[0].message
    assert _lint(path, _GATED.format(first="gate_proj", second="states"), "NPU432") == []


def test_eager_gated_norm_with_the_activation_on_the_states() -> None:
    code = """
    import torch.nn.functional as F


    class ToyNormGated:
        def forward(self, x, gate):
            y = x * self.weight
            return {expr}
    """
    path = "veomni/models/transformers/toy/modeling_toy.py"
    assert len(_lint(path, code.format(expr="gate * F.sigmoid(y)"), "NPU432")) == 1
    assert _lint(path, code.format(expr="y * F.silu(gate.float())"), "NPU432") == []


_BACKEND_IMPORT = """
from veomni.patchgen import PatchConfig

config = PatchConfig(source_module="transformers.models.toy.modeling_toy", target_file="x.py")


@config.override_method("ToyScan.forward")
def toy_scan_forward_patched(self, x):
{body}
"""


def test_tree_cuda_kernel_import_outside_the_backend_test() -> None:
    path = "veomni/models/transformers/toy/toy_gpu_patch_gen_config.py"
    hoisted = (
        "    from veomni.models.transformers.toy.scan_kernels import cuda_prefix_scan\n\n"
        '    if self.scan_impl == "cuda":\n'
        "        return cuda_prefix_scan(x)\n"
        "    return x.cumsum(-1)"
    )
    diags = _lint(path, _BACKEND_IMPORT.format(body=hoisted), "NPU305")
    assert len(diags) == 1 and diags[0].line == 8 and "cuda kernel" in diags[0].message
    guarded = (
        '    if self.scan_impl == "cuda":\n'
        "        from veomni.models.transformers.toy.scan_kernels import cuda_prefix_scan\n\n"
        "        return cuda_prefix_scan(x)\n"
        "    return x.cumsum(-1)"
    )
    assert _lint(path, _BACKEND_IMPORT.format(body=guarded), "NPU305") == []


def test_device_flags_are_not_kernels() -> None:
    path = "veomni/models/transformers/toy/modeling_toy.py"
    code = "from veomni.utils.device import IS_CUDA_AVAILABLE, get_cuda_device_name\n"
    assert _lint(path, code, "NPU305") == []


_FACTORY_ROWS = """
import torch_npu

from ...kernel_registry import KERNEL_REGISTRY, KernelSpec


def plain_norm_npu(x, w, eps):
    return torch_npu.npu_rms_norm(x, w, eps)[0]


def shifted_norm_npu(x, w, eps):
    return torch_npu.npu_rms_norm(x, 1.0 + w, eps)[0]


def _npu_plain_norm_factory():
    return {kernel}


KERNEL_REGISTRY.register(
    KernelSpec(name="npu", op_name="rms_norm", variant="plain", factory=_npu_plain_norm_factory)
)
"""


def test_factory_named_for_the_variant_returning_another_contract_is_reported_at_its_return() -> None:
    path = "veomni/ops/kernels/rms_norm/extra.py"
    # "plain" is not a variant npu-lint knows: the row's contract comes from its name, so use "standard"
    code = _FACTORY_ROWS.replace('"plain"', '"standard"').replace(
        "_npu_plain_norm_factory", "_npu_standard_norm_factory"
    )
    diags = _lint(path, code.format(kernel="shifted_norm_npu"), "NPU409")
    assert [d.line for d in diags] == [15]
    assert "returned by `_npu_standard_norm_factory`" in diags[0].message
    assert _lint(path, code.format(kernel="plain_norm_npu"), "NPU409") == []


_REIMPORT = """
from veomni.utils.import_utils import is_flash_attn_available

if is_flash_attn_available():
    from flash_attn import flash_attn_varlen_func


class ToyAttention:
    def forward(self, q, k, v, cu):
{body}
        return q
"""


def test_guarded_function_reimport_of_a_module_level_vendor_name_is_not_a_second_finding() -> None:
    path = "veomni/models/transformers/toy/modeling_toy.py"
    guarded = (
        "        if is_flash_attn_available():\n"
        "            from flash_attn import flash_attn_varlen_func\n\n"
        "            return flash_attn_varlen_func(q, k, v, cu, cu)"
    )
    assert [d.line for d in _lint(path, _REIMPORT.format(body=guarded), "NPU301")] == [4]
    unguarded = "        from flash_attn import flash_attn_varlen_func\n\n        q = flash_attn_varlen_func(q, k, v, cu, cu)"
    assert [d.line for d in _lint(path, _REIMPORT.format(body=unguarded), "NPU301")] == [4, 9]


_HANDLE_ONLY_ROPE = """
# Source: transformers.models.{model}
import torch
from veomni.ops import VeomniOp
from veomni.models_kernel.utils.op_utils import resolve_op_impl


class ToyAttention(torch.nn.Module):
    def __init__(self, config):
        super().__init__()
        self.rope_kernel = VeomniOp("rope", "full", resolve_op_impl("rotary_pos_emb_implementation"))

    def forward(self, q, k, cos, sin):
        return self.rope_kernel(q, k, cos, sin)
"""


def test_handle_only_rope_judged_against_the_upstream_rotary() -> None:
    path = "veomni/models_kernel/transformers/toy/generated/patched_modeling_toy_gpu.py"
    partial = _HANDLE_ONLY_ROPE.format(model="qwen3_5_moe.modeling_qwen3_5_moe").replace(
        "class ToyAttention", "class Qwen3_5MoeAttention"
    )
    diags = _lint(path, partial, "NPU214")
    assert len(diags) == 1 and diags[0].line == 10 and "upstream's `apply_rotary_pos_emb`" in diags[0].message
    full = _HANDLE_ONLY_ROPE.format(model="llama.modeling_llama").replace(
        "class ToyAttention", "class LlamaAttention"
    )
    assert _lint(path, full, "NPU214") == []


_CROSSED = """
from veomni.ops.dispatch import OpSlot

veomni_text_rope = OpSlot("rotary_pos_emb", "full")
veomni_tower_rope = OpSlot("rotary_pos_emb_vision", "full")


def apply_rotary_pos_emb(q, k, cos, sin):
    return {text}(q, k, cos, sin)


def apply_rotary_pos_emb_vision(q, k, cos, sin):
    return {vision}(q, k, cos, sin)
"""


def test_text_and_vision_rotary_slots_swapped() -> None:
    path = "veomni/models/transformers/toy/generated/patched_modeling_toy_npu.py"
    diags = _lint(path, _CROSSED.format(text="veomni_tower_rope", vision="veomni_text_rope"), "NPU214")
    assert [d.line for d in diags] == [8, 12]
    assert "`rotary_pos_emb_implementation` is meant" in diags[0].message
    assert _lint(path, _CROSSED.format(text="veomni_text_rope", vision="veomni_tower_rope"), "NPU214") == []
