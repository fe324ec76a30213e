"""Precision review rev18: correct variants in VeOmni's shapes that the reviewed rules reported; each must stay
quiet (and the rules' true positives keep reporting: their own dev tests)."""

from __future__ import annotations

import textwrap

import pytest

from tests.rules.snippets import lint_snippet

# -- NPU215: an NPU backend sharing a general package with a sibling while requiring torch_npu itself ----------
_TABLE_215 = """
from ...config.registry import BackendSpec, OpSpec, register_op

register_op(
    OpSpec(
        name="layer_norm",
        config_field="layer_norm_implementation",
        backends={{
            "{sibling}": BackendSpec(entry="veomni.ops.kernels.layer_norm.x:forward", requires=("{sibling}", "{shared}")),
            "npu": BackendSpec(entry="veomni.ops.kernels.layer_norm.npu:forward", requires=("torch_npu", "{shared}")),
        }},
    )
)
"""


@pytest.mark.parametrize(
    "sibling,shared", [("eager", "einops"), ("triton", "packaging"), ("liger_kernel", "torch")]
)
def test_npu215_shared_general_package_beside_torch_npu(sibling: str, shared: str) -> None:
    text = _TABLE_215.format(sibling=sibling, shared=shared)
    assert lint_snippet("veomni/ops/kernels/layer_norm/__init__.py", text, ["NPU215"]) == []


def test_npu215_gpu_vendor_beside_torch_npu_still_reports() -> None:
    text = _TABLE_215.format(sibling="liger_kernel", shared="flash_attn")
    assert [d.code for d in lint_snippet("veomni/ops/kernels/layer_norm/__init__.py", text, ["NPU215"])] == [
        "NPU215"
    ]


# -- NPU212: an NPU fallback entry added to the table by a module-level statement after its literal -------------
_OPS_212 = """
from dataclasses import dataclass, field
from typing import Dict

_NPU_ALLOWED: Dict[str, frozenset] = {
    "rms_norm_implementation": frozenset({"npu"}),
    "moe_implementation": frozenset({"fused_npu"}),
}
_NPU_DEFAULT_FALLBACK: Dict[str, str] = {
    "moe_implementation": "fused_npu",
}
{later}


@dataclass
class OpsImplementationConfig:
    rms_norm_implementation: str = field(default="liger_kernel")
    moe_implementation: str = field(default="fused_triton")
"""


@pytest.mark.parametrize(
    "later",
    [
        '_NPU_DEFAULT_FALLBACK["rms_norm_implementation"] = "npu"',
        '_NPU_DEFAULT_FALLBACK.update({"rms_norm_implementation": "npu"})',
        '_NPU_DEFAULT_FALLBACK.update(rms_norm_implementation="npu")',
        '_NPU_DEFAULT_FALLBACK.setdefault("rms_norm_implementation", "npu")',
        '_NPU_DEFAULT_FALLBACK |= {"rms_norm_implementation": "eager"}',
    ],
)
def test_npu212_entry_added_after_the_literal(later: str) -> None:
    text = _OPS_212.replace("{later}", later)
    assert lint_snippet("veomni/arguments/arguments_types.py", text, ["NPU212"]) == []


def test_npu212_entry_for_another_field_added_still_reports() -> None:
    text = _OPS_212.replace("{later}", '_NPU_DEFAULT_FALLBACK["swiglu_mlp_implementation"] = "eager"')
    assert [d.code for d in lint_snippet("veomni/arguments/arguments_types.py", text, ["NPU212"])] == [
        "NPU212"
    ]


# -- NPU312: a sibling kernel call on another path than the preparation, or before it -------------------------
_ROPE_312 = [
    """
    def rotary_forward(q, k, cos, sin, unsqueeze_dim=1):
        if q.dim() == 3:
            return torch_npu.npu_rotary_mul(q, cos, sin), torch_npu.npu_rotary_mul(k, cos, sin)
        cos_u = cos.unsqueeze(unsqueeze_dim)
        sin_u = sin.unsqueeze(unsqueeze_dim)
        return torch_npu.npu_rotary_mul(q, cos_u, sin_u), torch_npu.npu_rotary_mul(k, cos_u, sin_u)
    """,
    """
    def rotary_forward(q, k, cos, sin, unsqueeze_dim=1):
        if cos.dim() == q.dim():
            q_embed = torch_npu.npu_rotary_mul(q, cos, sin)
        else:
            cos_u = cos.unsqueeze(unsqueeze_dim)
            sin_u = sin.unsqueeze(unsqueeze_dim)
            q_embed = torch_npu.npu_rotary_mul(q, cos_u, sin_u)
        return q_embed
    """,
    """
    def rotary_forward(q, k, cos, sin):
        q_embed = torch_npu.npu_rotary_mul(q, cos, sin)
        cos_t = cos.transpose(1, 2)
        sin_t = sin.transpose(1, 2)
        k_embed = torch_npu.npu_rotary_mul(k.transpose(1, 2), cos_t, sin_t)
        return q_embed, k_embed
    """,
    """
    def rope_both(q, k, cos, sin, is_vision):
        if is_vision:
            cos_v = cos.repeat(1, 1, 2)
            sin_v = sin.repeat(1, 1, 2)
            return torch_npu.npu_rotary_mul(q, cos_v, sin_v), torch_npu.npu_rotary_mul(k, cos_v, sin_v)
        return torch_npu.npu_rotary_mul(q, cos, sin), torch_npu.npu_rotary_mul(k, cos, sin)
    """,
    """
    def rotary_forward(q, k, cos, sin, unsqueeze_dim=1):
        match q.dim():
            case 3:
                return torch_npu.npu_rotary_mul(q, cos, sin)
            case _:
                cos_u = cos.unsqueeze(unsqueeze_dim)
                return torch_npu.npu_rotary_mul(q, cos_u, sin.unsqueeze(unsqueeze_dim))
    """,
]


@pytest.mark.parametrize("body", _ROPE_312)
def test_npu312_sibling_call_not_after_the_preparation(body: str) -> None:
    text = "import torch_npu\n\n" + textwrap.dedent(body)
    assert lint_snippet("veomni/ops/kernels/rope/full/npu.py", text, ["NPU312"]) == []


def test_npu312_sibling_call_after_the_preparation_in_a_nested_block_still_reports() -> None:
    text = """
    import torch_npu


    def rotary_forward(q, k, cos, sin, unsqueeze_dim=1):
        cos_u = cos.unsqueeze(unsqueeze_dim)
        sin_u = sin.unsqueeze(unsqueeze_dim)
        q_embed = torch_npu.npu_rotary_mul(q, cos_u, sin_u)
        if k is not None:
            k = torch_npu.npu_rotary_mul(k, cos, sin_u)
        return q_embed, k
    """
    assert [d.code for d in lint_snippet("veomni/ops/kernels/rope/full/npu.py", text, ["NPU312"])] == [
        "NPU312"
    ]


# -- NPU465: the key norm computed with the query norm's epsilon (one config value for both norms) ---------------
_QK_465 = """
import torch_npu


def qk(self, query_states, key_states):
    query_states = torch_npu.npu_rms_norm(query_states, self.q_norm.weight, epsilon=self.q_norm.{q_eps})[0]
    key_states = torch_npu.npu_rms_norm(key_states, self.k_norm.{k_w}, epsilon=self.q_norm.{q_eps})[0]
    return query_states, key_states
"""


@pytest.mark.parametrize("q_eps", ["variance_epsilon", "eps"])
def test_npu465_query_norm_epsilon_shared(q_eps: str) -> None:
    text = _QK_465.format(q_eps=q_eps, k_w="weight")
    assert lint_snippet("veomni/models/transformers/m/modeling_m.py", text, ["NPU465"]) == []


def test_npu465_query_norm_weight_on_the_keys_still_reports() -> None:
    text = _QK_465.format(q_eps="eps", k_w="weight").replace(
        "self.k_norm.weight, epsilon=self.q_norm.eps", "self.q_norm.weight, epsilon=self.k_norm.eps"
    )
    assert [d.code for d in lint_snippet("veomni/models/transformers/m/modeling_m.py", text, ["NPU465"])] == [
        "NPU465"
    ]


# -- NPU421: a returned loss that is no shard loss (gathered inputs), reduced through a helper, or handed on with
# its count for the caller to reduce -----------------------------------------------------------------------------
_CHUNK_421 = """
import torch
from ....distributed.parallel_state import get_parallel_state
from ....distributed.sequence_parallel import reduce_sequence_parallel_loss


def chunk_loss_function(hidden_states, weights, labels, ignore_index=-100, **kwargs):
    sp_enabled = get_parallel_state().sp_enabled
    if not sp_enabled:
        labels = labels[..., 1:].contiguous()
    chunk_loss = ChunkLoss.apply(hidden_states, weights, labels)
{tail}
"""
_QUIET_421 = [
    "    if sp_enabled:\n        chunk_loss = _sp_reduce(chunk_loss, labels, ignore_index)\n    return chunk_loss, None\n\n\n"
    "def _sp_reduce(loss, labels, ignore_index):\n    return reduce_sequence_parallel_loss(loss, (labels != ignore_index).sum())",
    "    num_valid_tokens = (labels != ignore_index).sum()\n    return chunk_loss, num_valid_tokens",
    "    reduce_fn = reduce_sequence_parallel_loss if sp_enabled else (lambda loss, n: loss)\n"
    "    chunk_loss = reduce_fn(chunk_loss, (labels != ignore_index).sum())\n    return chunk_loss, None",
]


@pytest.mark.parametrize("tail", _QUIET_421)
def test_npu421_returned_loss_reduced_elsewhere(tail: str) -> None:
    text = _CHUNK_421.replace("{tail}", tail)
    assert lint_snippet("veomni/ops/kernels/cross_entropy/chunk_loss.py", text, ["NPU421"]) == []


_MODEL_421 = """
from veomni.distributed.parallel_state import get_parallel_state
from veomni.distributed.sequence_parallel import gather_outputs, reduce_sequence_parallel_loss


class ToyForCausalLM:
    def forward(self, input_ids, labels=None, **kwargs):
        hidden_states = self.model(input_ids)
        if get_parallel_state().sp_enabled:
            hidden_states = gather_outputs(hidden_states, gather_dim=1, group=get_parallel_state().sp_group)
        loss, logits = self.loss_function(hidden_states=hidden_states, weights=self.lm_head.weight, labels=labels)
        return loss, logits

    def aux(self, router_logits):
        if get_parallel_state().sp_enabled:
            router_logits = all_gather_router_logits(router_logits)
        aux_loss = load_balancing_loss_func(router_logits, self.num_experts, self.top_k)
        return aux_loss
"""


def test_npu421_loss_of_gathered_inputs_is_no_shard_loss() -> None:
    assert lint_snippet("veomni/models/transformers/toy/modeling_toy.py", _MODEL_421, ["NPU421"]) == []


def test_npu421_returned_chunk_loss_unreduced_still_reports() -> None:
    text = _CHUNK_421.replace("{tail}", "    return chunk_loss, None")
    assert [
        d.code for d in lint_snippet("veomni/ops/kernels/cross_entropy/chunk_loss.py", text, ["NPU421"])
    ] == ["NPU421"]


# -- NPU705: a wrapper's own key mapping is not owed to an equipped text model that has its converter ---------------
_LOADER_705 = """
from ...loader import MODELING_REGISTRY


def _text_targets(_model, modules, patterns):
    return patterns


@MODELING_REGISTRY.register("toy_vl_moe")
def register_toy_vl_moe_modeling(architecture: str):
    from .checkpoint_tensor_converter import create_toy_converter
    from .generated.patched_modeling_toy_vl_moe_gpu import ToyForConditionalGeneration, ToyModel, ToyTextModel

    for model_cls in (ToyForConditionalGeneration, ToyModel, ToyTextModel):
        model_cls._create_checkpoint_tensor_converter = staticmethod(create_toy_converter)
    ToyTextModel._convert_lora_targets_to_parameters = staticmethod(_text_targets)
    ToyForConditionalGeneration._checkpoint_conversion_mapping = {"^model.language_model": "model.language_model"}
    ToyModel._checkpoint_conversion_mapping = {"^language_model": "language_model"}
    if "ForConditionalGeneration" in architecture:
        return ToyForConditionalGeneration
    return ToyModel
"""


def test_npu705_per_class_key_mapping_not_owed_to_the_text_model() -> None:
    assert lint_snippet("veomni/models/transformers/toy_vl_moe/__init__.py", _LOADER_705, ["NPU705"]) == []


def test_npu705_shared_converter_missing_on_the_text_model_still_reports() -> None:
    text = _LOADER_705.replace("ToyModel, ToyTextModel):", "ToyModel):")
    found = lint_snippet("veomni/models/transformers/toy_vl_moe/__init__.py", text, ["NPU705"])
    assert any("_create_checkpoint_tensor_converter" in d.message for d in found)


# -- NPU707: a patched method's keywords dropped on purpose (`**_unused`, `del kwargs`) beside a twin that splats ----
_SPEC_707 = """
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.qwen2_5_vl.modeling_qwen2_5_vl", target_file="x.py")


@config.override_method("Qwen2_5_VLModel.get_image_features")
def image_features_patched(self, pixel_values, image_grid_thw=None, **kwargs):
    return self.visual(pixel_values, grid_thw=image_grid_thw, return_dict=True, **kwargs)


@config.override_method("Qwen2_5_VLModel.get_video_features")
def video_features_patched(self, pixel_values_videos, video_grid_thw=None, **{kw}):
    {drop}
    return self.visual(pixel_values_videos, grid_thw=video_grid_thw, return_dict=True)
"""


@pytest.mark.parametrize("kw,drop", [("_unused", "pass"), ("kwargs", "del kwargs  # no video metadata")])
def test_npu707_keywords_dropped_on_purpose(kw: str, drop: str) -> None:
    text = _SPEC_707.replace("{kw}", kw).replace("{drop}", drop)
    path = "veomni/models/transformers/qwen2_5vl/qwen2_5_vl_gpu_patch_gen_config.py"
    assert [d for d in lint_snippet(path, text, ["NPU707"]) if "**" in d.message] == []


def test_npu707_keywords_swallowed_still_reports() -> None:
    text = _SPEC_707.replace("{kw}", "kwargs").replace("{drop}", "pass")
    path = "veomni/models/transformers/qwen2_5vl/qwen2_5_vl_gpu_patch_gen_config.py"
    assert [d.code for d in lint_snippet(path, text, ["NPU707"]) if "**" in d.message] == ["NPU707"]


# -- NPU402: Gemma's offset expanded into a sum over a local (`scaled = x * w`, then `x + scaled`) -------------------
_NORM_402 = """
import torch
from torch import nn


class ToyRMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float())
        scaled = output * self.weight.float()
        return ({total}).type_as(x)
"""


@pytest.mark.parametrize("total", ["output + scaled", "scaled + output"])
def test_npu402_offset_expanded_over_a_local(total: str) -> None:
    text = _NORM_402.replace("{total}", total)
    assert lint_snippet("veomni/models/transformers/toy/modeling_toy.py", text, ["NPU402"]) == []


def test_npu402_raw_weight_through_a_local_still_reports() -> None:
    text = _NORM_402.replace("{total}", "scaled")
    assert [
        d.code for d in lint_snippet("veomni/models/transformers/toy/modeling_toy.py", text, ["NPU402"])
    ] == ["NPU402"]


# -- NPU470: a loss of detached logits computed as a measurement (never returned, stored or back-propagated) --------
_STATS_470 = """
import torch.nn.functional as F


def forward(self, input_ids, labels=None):
    logits = self.lm_head(self.model(input_ids).last_hidden_state)
    loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten())
    per_token_loss = F.cross_entropy(logits.detach().float().flatten(0, 1), labels.flatten(), reduction="none")
    {use}
    return loss, logits
"""


def test_npu470_detached_loss_used_as_a_measurement() -> None:
    text = _STATS_470.replace("{use}", "self.token_stats.update(per_token_loss)")
    assert lint_snippet("veomni/models/transformers/toy/modeling_toy.py", text, ["NPU470"]) == []


@pytest.mark.parametrize("use", ["loss = loss + per_token_loss.mean()", "self.aux = per_token_loss"])
def test_npu470_detached_loss_in_the_objective_still_reports(use: str) -> None:
    text = _STATS_470.replace("{use}", use)
    assert [
        d.code for d in lint_snippet("veomni/models/transformers/toy/modeling_toy.py", text, ["NPU470"])
    ] == ["NPU470"]


# -- NPU471: loss-named locals that are no term (a mask popped from the batch, a weight, a logged value), a term
# dropped with `del` -----------------------------------------------------------------------------------------------
_FWD_471 = """
import torch.nn.functional as F


def forward(self, input_ids, labels=None, **kwargs):
    {extra}
    logits = self.lm_head(self.model(input_ids, **kwargs).last_hidden_state)
    loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten())
    return loss, logits
"""


@pytest.mark.parametrize(
    "extra",
    [
        'loss_mask = kwargs.pop("loss_mask", None)',
        "loss_weight = self.config.loss_weight",
        "loss_value = labels.float().mean().item()",
        'loss_dict = {"n": labels.numel()}',
        'aux_loss = kwargs.pop("aux_loss")\n    del aux_loss',
    ],
)
def test_npu471_no_term_or_dropped_on_purpose(extra: str) -> None:
    text = _FWD_471.replace("{extra}", extra)
    assert lint_snippet("veomni/models/transformers/toy/modeling_toy.py", text, ["NPU471"]) == []


def test_npu471_term_unread_still_reports() -> None:
    text = _FWD_471.replace("{extra}", "kl_loss = self.kl_term(input_ids)")
    assert [
        d.code for d in lint_snippet("veomni/models/transformers/toy/modeling_toy.py", text, ["NPU471"])
    ] == ["NPU471"]


# -- NPU235: a module name only declared (`name: T`), or a dead local beside a call of the file's own setter ---------
_STATE_235 = """
_ops_config = None


def set_ops_config(config):
    global _ops_config
    _ops_config = config


def get_ops_config():
    return _ops_config


def {body}
"""


@pytest.mark.parametrize(
    "body",
    [
        'typed_stub(config) -> None:\n    _ops_config: "OpsConfig"\n    print(config)',
        "clear():\n    _ops_config = None  # noqa: F841\n    set_ops_config(None)",
    ],
)
def test_npu235_no_install_lost(body: str) -> None:
    text = _STATE_235.replace("{body}", body)
    assert lint_snippet("veomni/ops/config/singleton.py", text, ["NPU235"]) == []


def test_npu235_reset_without_global_still_reports() -> None:
    text = _STATE_235.replace(
        "{body}", "clear():\n    _ops_config = None  # noqa: F841\n    print('cleared')"
    )
    assert [d.code for d in lint_snippet("veomni/ops/config/singleton.py", text, ["NPU235"])] == ["NPU235"]


# -- NPU103: a host value moved with `.to(<tensor>)` whose name holds a dtype word as a substring (`keypoints`) -----
_MOVE_103 = """
import torch
from torch import nn


class ToyModel(nn.Module):
    def forward(self, hidden_states, {name}):
        divisor = torch.tensor([[4.0, 3.0]])
        divisor = divisor.to({name})
        return {name} / divisor
"""


@pytest.mark.parametrize("name", ["keypoints", "hint_states", "checkpoint_acts"])
def test_npu103_moved_to_a_tensor_whose_name_holds_a_dtype_substring(name: str) -> None:
    text = _MOVE_103.replace("{name}", name)
    assert lint_snippet("veomni/models/transformers/toy/modeling_toy.py", text, ["NPU103"]) == []


@pytest.mark.parametrize("name", ["compute_dtype", "torch.int32", "torch.bfloat16"])
def test_npu103_cast_to_a_dtype_still_reports(name: str) -> None:
    text = _MOVE_103.replace("divisor.to({name})", f"divisor.to({name})").replace(
        "def forward(self, hidden_states, {name}):", "def forward(self, hidden_states, x):"
    )
    text = text.replace("return {name} / divisor", "return hidden_states / divisor").replace("{name}", name)
    assert [
        d.code for d in lint_snippet("veomni/models/transformers/toy/modeling_toy.py", text, ["NPU103"])
    ] == ["NPU103"]
