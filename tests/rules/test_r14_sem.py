"""Round 14 (semantics, multimodal, device): checks widened to whole code regions, each shown on variants in
other files and models of the region than the dev case that prompted it."""

from __future__ import annotations

import textwrap

from tests.rules.snippets import lint_snippet


def _codes(path: str, text: str, codes: list[str]) -> list[tuple[str, int]]:
    return sorted((d.code, d.line) for d in lint_snippet(path, text, codes))


# -- NPU458: an unpatched copy spelled with Tensor methods instead of torch functions is the same computation --

_GEN_BANNER = """
# ==============================================================================
#  AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
# ==============================================================================
#
#  Source: transformers.models.qwen3.modeling_qwen3
#  Based on: transformers==5.9.0
#
#  Patches applied:
#    - method_override: Qwen3ForCausalLM.forward
#      loss
#
# ==============================================================================

import torch
from torch import nn


class Qwen3RMSNorm(nn.Module):
    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
{body}
        return self.weight * hidden_states.to(input_dtype)
"""
_GEN_PATH = "veomni/models/transformers/qwen3/generated/patched_modeling_qwen3_gpu.py"


def _gen(body: str) -> list[tuple[str, int]]:
    return _codes(
        _GEN_PATH, _GEN_BANNER.replace("{body}", textwrap.indent(textwrap.dedent(body), " " * 8)), ["NPU458"]
    )


def test_npu458_tensor_method_spellings_are_upstream_code() -> None:
    assert (
        _gen(
            """
        variance = hidden_states.square().mean(dim=-1, keepdim=True)
        hidden_states = hidden_states * (variance + self.variance_epsilon).rsqrt()
        """
        )
        == []
    )
    assert (
        _gen(
            """
        variance = torch.square(hidden_states).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        """
        )
        == []
    )
    # the same method spelling with another computation is still an edit
    assert (
        _gen(
            """
        variance = hidden_states.square().mean(dim=-1, keepdim=True)
        hidden_states = hidden_states * (variance + self.variance_epsilon).sqrt()
        """
        )
        != []
    )


# -- NPU410: a norm statistic used the wrong way round, in any function of the tree (not only RMSNorm classes) --

_L2NORM = """
import torch


def l2norm(x: torch.FloatTensor, dim: int = -1, eps: float = 1e-6):
    original_dtype = x.dtype
    inv_norm = torch.rsqrt((x * x).sum(dim=dim, keepdim=True) + eps)
    return (x {op} inv_norm).to(original_dtype)
"""

_QKNORM = """
import torch
from torch import nn


class QKNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.scale = nn.Parameter(torch.ones(dim))

    def forward(self, q):
        q32 = q.float()
        rrms = torch.rsqrt(torch.mean(q32**2, dim=-1, keepdim=True) + self.eps)
        return (q32 {op} rrms).to(q.dtype) * self.scale
"""

_PIXEL = """
import torch


def pixel_norm(z, eps=1e-8):
    norm = z.square().mean(dim=1, keepdim=True).add(eps).sqrt()
    return z {op} norm
"""

_NOT_A_NORM = """
import torch


def rescale_noise_cfg(noise_cfg, noise_pred_text, guidance_rescale=0.0):
    std_text = torch.sqrt(noise_pred_text.pow(2).mean(dim=-1, keepdim=True) + 1e-6)
    rescaled = noise_cfg * std_text
    return guidance_rescale * rescaled + (1 - guidance_rescale) * noise_cfg
"""


def test_npu410_reads_every_function_taking_a_root_of_its_own_squares() -> None:
    cases = [
        ("veomni/ops/kernels/gated_delta_rule/_ascend/flash_gated_delta_rule.py", _L2NORM, "*", "/"),
        ("veomni/models/diffusers/flux/modeling_flux.py", _QKNORM, "*", "/"),
        ("veomni/models/seed_omni/decoder/movqgan/modeling_movqgan.py", _PIXEL, "/", "*"),
    ]
    for path, text, good, bad in cases:
        assert _codes(path, text.replace("{op}", good), ["NPU410"]) == [], path
        found = _codes(path, text.replace("{op}", bad), ["NPU410"])
        line = next(
            i for i, s in enumerate(textwrap.dedent(text).lstrip("\n").splitlines(), 1) if "{op}" in s
        )
        assert found == [("NPU410", line)], (path, found)
    # another tensor's RMS scaling this one (noise rescaling) is not a norm used backwards
    assert _codes("veomni/models/diffusers/wan/pipeline.py", _NOT_A_NORM, ["NPU410"]) == []


# -- NPU720: twin per-medium bundles one function builds (vit kwargs, processor kwargs, metadata records) --

_QWEN3_VL_SPEC = """
def qwen3_vl_model_forward_patched(self, input_ids, pixel_values=None, pixel_values_videos=None, **kwargs):
    multimodal_metadata = kwargs.pop("multimodal_metadata", None) or {}
    image_vit_kwargs = {
        "vit_metadata": {
            "grid_thw_list": multimodal_metadata.get("image_grid_thw_list"),
            "cu_seqlens": multimodal_metadata.get("vit_image_cu_seqlens"),
            "max_seqlen": multimodal_metadata.get("vit_image_max_seqlen"),
        }
    }
    video_vit_kwargs = {
        "vit_metadata": {
            "grid_thw_list": multimodal_metadata.get("video_grid_thw_list"),
            "cu_seqlens": multimodal_metadata.get("vit_video_cu_seqlens"),
            "max_seqlen": multimodal_metadata.get("vit_video_max_seqlen"),
        }
    }
    image_embeds = self.get_image_features(pixel_values, **image_vit_kwargs)
    video_embeds = self.get_video_features(pixel_values_videos, **video_vit_kwargs)
    return image_embeds, video_embeds
"""

_OMNI_PROCESSOR = """
def build_omni_inputs(processor, images, videos, audios, fps):
    image_inputs = {"images": images, "return_tensors": "pt", "do_resize": True}
    video_inputs = {"videos": videos, "return_tensors": "pt", "do_resize": True, "fps": fps}
    audio_inputs = {"audio": audios, "return_tensors": "pt", "sampling_rate": 16000}
    return processor(**image_inputs), processor(**video_inputs), processor(**audio_inputs)
"""

_COLLATE_META = """
def pack_media_metadata(batch):
    image_meta = {"grid_thw": batch["image_grid_thw"], "num_tokens": batch["image_num_tokens"]}
    video_meta = {"grid_thw": batch["video_grid_thw"], "num_tokens": batch["video_num_tokens"]}
    return image_meta, video_meta
"""


def _line_with(text: str, needle: str) -> int:
    return next(i for i, s in enumerate(textwrap.dedent(text).lstrip("\n").splitlines(), 1) if needle in s)


def test_npu720_twin_bundles_in_other_models_and_modules() -> None:
    spec = "veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py"
    assert _codes(spec, _QWEN3_VL_SPEC, ["NPU720"]) == []
    dropped = _QWEN3_VL_SPEC.replace(
        '            "max_seqlen": multimodal_metadata.get("vit_video_max_seqlen"),\n', ""
    )
    assert _codes(spec, dropped, ["NPU720"]) == [("NPU720", _line_with(dropped, '"vit_video_cu_seqlens"'))]
    crossed = _QWEN3_VL_SPEC.replace('get("vit_video_cu_seqlens")', 'get("vit_image_cu_seqlens")')
    line = [
        i for i, t in enumerate(textwrap.dedent(crossed).lstrip("\n").splitlines(), 1) if "vit_image_cu" in t
    ]
    assert _codes(spec, crossed, ["NPU720"]) == [("NPU720", line[1])]
    # a video-only key beside the image keys (fps) is the video's own; audio keys are another medium's vocabulary
    data = "veomni/data/multimodal/preprocess.py"
    assert _codes(data, _OMNI_PROCESSOR, ["NPU720"]) == []
    unresized = _OMNI_PROCESSOR.replace(
        '"return_tensors": "pt", "do_resize": True, "fps"', '"return_tensors": "pt", "fps"'
    )
    assert _codes(data, unresized, ["NPU720"]) == [("NPU720", 3)]
    meta = "veomni/data/multimodal/collate_meta.py"
    assert _codes(meta, _COLLATE_META, ["NPU720"]) == []
    lost = _COLLATE_META.replace(', "num_tokens": batch["video_num_tokens"]', "")
    assert _codes(meta, lost, ["NPU720"]) == [("NPU720", 3)]


# -- NPU704: a position-id pipeline none of whose stages computes position ids (Seed-Omni foundations, wrappers) --

_OMNI_FOUNDATION = """
from ....transformers.qwen2_5_omni.generated.patched_modeling_qwen2_5_omni_gpu import (
    Qwen2_5OmniThinkerForConditionalGeneration,
)
from ..base import BaseFoundationModelMixin


def parse_position_id_kwargs(input_ids, attention_mask, grid_thw=None, **kwargs):
    out = {"input_ids": input_ids, "attention_mask": attention_mask}
    if grid_thw:
        out["image_grid_thw"] = grid_thw.get("image")
    return out


class Qwen2_5OmniFoundationModel(BaseFoundationModelMixin, Qwen2_5OmniThinkerForConditionalGeneration):
    def get_position_id_func(self):
        return [parse_position_id_kwargs{stage}]
"""

_MOE_FOUNDATION = """
from types import SimpleNamespace


def parse_position_id_kwargs(input_ids, attention_mask, grid_thw=None, **kwargs):
    return {"input_ids": input_ids, "attention_mask": attention_mask, **(grid_thw or {})}


def rename_audio_kwargs(audio_feature_lengths=None, **kwargs):
    return {"audio_seqlens": audio_feature_lengths, **kwargs}


class Qwen3MoeFoundationModel:
    def get_position_id_func(self):
        if self.rope_type == "3d_rope":
            fake_model = SimpleNamespace(spatial_merge_size=self.spatial_merge_size)
            return [parse_position_id_kwargs, rename_audio_kwargs{stage}]
        return None
"""

_OWN_STAGE = """
def text_positions(input_ids, **kwargs):
    return {"input_ids": input_ids, "position_ids": torch.arange(input_ids.shape[-1])}


class JanusFoundation:
    def get_position_id_func(self):
        return [text_positions]
"""


def test_npu704_position_pipelines_of_other_foundations() -> None:
    omni = "veomni/models/seed_omni/foundation/qwen2_5_omni_foundation/modeling_qwen2_5_omni_foundation.py"
    full = ", Qwen2_5OmniThinkerForConditionalGeneration.get_position_id_func(self)"
    assert _codes(omni, _OMNI_FOUNDATION.replace("{stage}", full), ["NPU704"]) == []
    assert _codes(omni, _OMNI_FOUNDATION.replace("{stage}", ""), ["NPU704"]) == [
        ("NPU704", _line_with(_OMNI_FOUNDATION, "{stage}"))
    ]
    moe = "veomni/models/seed_omni/foundation/qwen3_moe_foundation/modeling_qwen3_moe_foundation.py"
    full = ", Qwen2_5OmniThinkerForConditionalGeneration.get_position_id_func(fake_model)"
    assert _codes(moe, _MOE_FOUNDATION.replace("{stage}", full), ["NPU704"]) == []
    assert _codes(moe, _MOE_FOUNDATION.replace("{stage}", ""), ["NPU704"]) == [
        ("NPU704", _line_with(_MOE_FOUNDATION, "{stage}"))
    ]
    # a stage of the file that writes position ids itself is the position function
    janus = "veomni/models/seed_omni/foundation/janus_foundation/modeling_janus_foundation.py"
    assert _codes(janus, _OWN_STAGE, ["NPU704"]) == []
    assert _codes(
        janus, _OWN_STAGE.replace('"position_ids": torch.arange(input_ids.shape[-1])', '"ids": 0'), ["NPU704"]
    ) == [("NPU704", _line_with(_OWN_STAGE, "return [text_positions]"))]


# -- NPU724: an override of a collator row that cuts what every rank consumes whole (masks, grids) --


def test_npu724_overrides_cutting_whole_fields_in_other_models() -> None:
    rows = {
        "veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py": (
            '"video_grid_thw": (0, {cut}, None, None)',
        ),
        "veomni/models/transformers/qwen2_5_omni/qwen2_5_omni_gpu_patch_gen_config.py": (
            '"image_mask": (-1, {cut}, 0, 1)',
        ),
        "veomni/models/seed_omni/modeling_seed_omni.py": (
            '"image_grid_hw": DataCollateInfo(0, {cut}, None, None)',
        ),
    }
    template = """
    def get_extra_collate_infos(self):
        return {{
            "pixel_values": (0, False, 0, 4),
            {row},
        }}
    """
    for path, (row,) in rows.items():
        whole = template.format(row=row.format(cut="False"))
        cut = template.format(row=row.format(cut="True"))
        assert _codes(path, whole, ["NPU724"]) == [], path
        assert _codes(path, cut, ["NPU724"]) == [("NPU724", 4)], path


# -- NPU110: whether an autograd kernel reads an argument on the host is decided by its forward, not its name --

_EP_KERNEL = """
import torch
import torch.distributed as dist


class {fn}(torch.autograd.Function):
    @staticmethod
    def forward(ctx, group, tokens, {p1}, {p2}):
        {body}
        return out

    @staticmethod
    def backward(ctx, grad):
        return None, grad, None, None


def preprocess(mask):
    counts = mask.sum(dim=(1, 2))
    return counts.to(torch.device("cpu"), non_blocking=True)


def dispatch(hidden_states, mask, group):
    host_counts = preprocess(mask)
    {a1} = host_counts.long()
    {a2} = torch.cumsum(host_counts, 0)
    return {fn}.apply(group, hidden_states, {a1}, {a2})
"""


def _ep(path: str, **names: str) -> list[tuple[str, int]]:
    return _codes(path, _EP_KERNEL.format(**names), ["NPU110"])


def test_npu110_reads_the_kernels_forward() -> None:
    line = _line_with(_EP_KERNEL, "return {fn}.apply")
    # a2a split sizes by a neutral name: the forward hands them to all_to_all_single (host) -> quiet
    a2a = "out = torch.empty_like(tokens); dist.all_to_all_single(out, tokens, output_split_sizes=sizes_out.tolist(), input_split_sizes=sizes_in.tolist(), group=group)"
    assert (
        _ep(
            "veomni/distributed/moe/moe_utils.py",
            fn="AllToAllTokens",
            p1="sizes_in",
            p2="sizes_out",
            body=a2a,
            a1="c_in",
            a2="c_out",
        )
        == []
    )
    # a name that says "splits" but a forward that uses it as grouped-GEMM offsets on the device -> reported
    gemm = "out = torch.ops.npu.npu_grouped_matmul([tokens], [group], group_list=splits_cum, split_item=2)[0] + splits.sum()"
    found = _ep(
        "veomni/ops/kernels/moe/_kernels/group_gemm.py",
        fn="GroupGemm",
        p1="splits",
        p2="splits_cum",
        body=gemm,
        a1="input_splits",
        a2="output_splits",
    )
    assert found == [("NPU110", line), ("NPU110", line)], found
    # a kernel looping over its host counts in Python: quiet for both, whatever the caller calls them
    loop = "out = torch.cat([tokens[: int(c)] for c in counts]); [None for _ in range(offs)]\n        for c in counts:\n            pass"
    assert (
        _ep(
            "veomni/distributed/sequence_parallel/ulysses_moe.py",
            fn="LoopKernel",
            p1="counts",
            p2="offs",
            body=loop,
            a1="offsets",
            a2="cum",
        )
        == []
    )


# -- NPU423: a step's global (all-rank) count assigned the rank's own, in any trainer or loss utility --

_VLM_TRAINER = """
from ..utils.loss_utils import count_loss_token, reduce_global_loss_token


class VLMTrainer:
    def train_step(self, data_iterator):
        micro_batches = next(data_iterator)
        self.base.micro_batches_token_len = count_loss_token(micro_batches)
        self.base.global_micro_batches_token_len = {rhs}
        return micro_batches
"""

_BASE_TRAINER = """
class BaseTrainer:
    def _prepare_step(self, micro_batches):
        self.micro_batches_token_len = count_loss_token(micro_batches)
        self.global_micro_batches_token_len = {rhs}
"""

_LOSS_UTIL = """
def step_token_counts(micro_batches):
    num_tokens = {"ce_tokens": sum((mb["labels"] != -100).sum() for mb in micro_batches)}
    global_num_tokens = {rhs}
    return global_num_tokens
"""


def test_npu423_global_counts_in_other_trainers_and_utilities() -> None:
    cases = [
        (
            "veomni/trainer/vlm_trainer.py",
            _VLM_TRAINER,
            "reduce_global_loss_token(self.base.micro_batches_token_len)",
            "self.base.micro_batches_token_len",
        ),
        (
            "veomni/trainer/base.py",
            _BASE_TRAINER,
            "reduce_global_loss_token(self.micro_batches_token_len)",
            "dict(self.micro_batches_token_len)",
        ),
        (
            "veomni/utils/loss_utils.py",
            _LOSS_UTIL,
            "{k: all_reduce(v.item(), op='sum') for k, v in num_tokens.items()}",
            "{k: v.item() for k, v in num_tokens.items()}",
        ),
    ]
    for path, text, good, bad in cases:
        assert _codes(path, text.replace("{rhs}", good), ["NPU423"]) == [], path
        assert _codes(path, text.replace("{rhs}", bad), ["NPU423"]) == [
            ("NPU423", _line_with(text, "{rhs}"))
        ], path


# -- NPU103: helpers annotated with forward references ("torch.Tensor") read as tensor code --

_SP_HELPER = """
import torch


def segment_starts(cu_seqlens: "torch.Tensor") -> "torch.Tensor":
    sizes = seqlens_of(cu_seqlens).tolist()
    return torch.arange(len(sizes){dev})
"""

_MOE_INDEX = """
import torch


def expert_starts(tokens_per_expert: "torch.LongTensor"):
    n = num_local_experts(tokens_per_expert)
    return torch.arange(n{dev})
"""

_LOSS_POS = """
import torch


def sample_index(boundaries: "torch.Tensor"):
    sizes = lengths_from(boundaries).cpu()
    return torch.cat([torch.full((int(n),), i{dev}) for i, n in enumerate(sizes)])
"""


def test_npu103_forward_reference_annotations_in_other_helpers() -> None:
    cases = [
        ("veomni/distributed/sequence_parallel/seg_utils.py", _SP_HELPER, ", device=cu_seqlens.device"),
        ("veomni/ops/kernels/moe/_kernels/offsets.py", _MOE_INDEX, ", device=tokens_per_expert.device"),
        ("veomni/utils/packing_index.py", _LOSS_POS, ", device=boundaries.device"),
    ]
    for path, text, dev in cases:
        assert _codes(path, text.replace("{dev}", dev), ["NPU103"]) == [], path
        assert _codes(path, text.replace("{dev}", ""), ["NPU103"]) == [
            ("NPU103", _line_with(text, "{dev}"))
        ], path


# -- NPU432: a gated norm that drops its gate, or feeds a fused GLU halves concatenated on another axis --

_MAMBA_GATED = """
import torch
import torch.nn.functional as F
from torch import nn


class MambaRMSNormGated(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states, gate=None):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        {gating}
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)
"""

_KERNEL_GATED = """
import torch
import torch_npu


def rms_norm_gated_npu(x, weight, gate, eps=1e-6):
    normed = torch_npu.npu_rms_norm(x, weight, eps)[0]
    return torch_npu.npu_swiglu(torch.cat([gate, normed], dim={dim}), dim=-1)
"""

_LIGER_GATED = """
import torch
from torch import nn


class FusedGatedRMSNorm(nn.Module):
    def forward(self, x, gate):
        y = self.norm(x)
        return silu_and_mul(torch.cat((gate, y){dim}))
"""


def test_npu432_gated_norms_elsewhere() -> None:
    mamba = "veomni/models/transformers/nemotron_h/modeling_nemotron_h.py"
    good = _MAMBA_GATED.replace("{gating}", "hidden_states = hidden_states * F.silu(gate.to(torch.float32))")
    assert _codes(mamba, good, ["NPU432"]) == []
    bad = _MAMBA_GATED.replace("{gating}", "pass")
    assert _codes(mamba, bad, ["NPU432"]) == [("NPU432", _line_with(bad, "def forward"))]
    kernel = "veomni/ops/kernels/rms_norm_gated/npu.py"
    assert _codes(kernel, _KERNEL_GATED.replace("{dim}", "-1"), ["NPU432"]) == []
    assert _codes(kernel, _KERNEL_GATED.replace("{dim}", "0"), ["NPU432"]) == [
        ("NPU432", _line_with(_KERNEL_GATED, "{dim}"))
    ]
    liger = "veomni/ops/kernels/gated_delta_rule/fused_norm_gate.py"
    assert _codes(liger, _LIGER_GATED.replace("{dim}", ", dim=-1"), ["NPU432"]) == []
    assert _codes(liger, _LIGER_GATED.replace("{dim}", ""), ["NPU432"]) == [
        ("NPU432", _line_with(_LIGER_GATED, "{dim}"))
    ]


def test_npu423_global_representations_are_not_job_totals() -> None:
    text = """
    def forward(self, hidden_states, labels):
        global_hidden_states = hidden_states
        loss = self.loss_fn(global_hidden_states, labels)
        return loss
    """
    assert _codes("veomni/models/transformers/clap/modeling_clap.py", text, ["NPU423"]) == []


# -- NPU425 / NPU444: chunked loss kernels (accumulators over the chunks, the backward's scaling) --

_CHUNK_KERNEL = """
import torch


class ChunkedLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, labels, chunk_size):
        total_loss = torch.zeros((), device=hidden.device, dtype=torch.float32)
        grad_hidden = torch.empty_like(hidden)
        grad_weight = torch.zeros_like(weight)
        for h, g, y in zip(hidden.split(chunk_size), grad_hidden.split(chunk_size), labels.split(chunk_size)):
            (gh, gw), loss = torch.func.grad_and_value(_chunk_loss, argnums=(0, 1))(h, weight, y)
            {acc_loss}
            g.copy_(gh)
            {acc_grad}
        ctx.save_for_backward(grad_hidden, grad_weight)
        return total_loss

    @staticmethod
    def backward(ctx, grad_output):
        grad_hidden, grad_weight = ctx.saved_tensors
        grad_hidden = grad_hidden * grad_output
        {scale_weight}
        return grad_hidden, grad_weight, None, None
"""


def _chunk(**parts: str) -> str:
    base = {
        "acc_loss": "total_loss += loss",
        "acc_grad": "grad_weight.add_(gw)",
        "scale_weight": "grad_weight = grad_weight * grad_output",
    }
    base.update(parts)
    text = _CHUNK_KERNEL
    for k, v in base.items():
        text = text.replace("{" + k + "}", v)
    return text


def test_npu425_npu444_chunked_loss_kernels_in_other_files() -> None:
    paths = [
        "veomni/ops/kernels/cross_entropy/chunk_logprobs.py",
        "veomni/ops/kernels/cross_entropy/chunk_topk_distill.py",
        "veomni/ops/kernels/load_balancing_loss/chunked.py",
    ]
    for path in paths:
        assert _codes(path, _chunk(), ["NPU425", "NPU444"]) == [], path
        text = _chunk(acc_loss="total_loss = loss")
        assert _codes(path, text, ["NPU425", "NPU444"]) == [("NPU425", _line_with(text, "total_loss = loss"))]
        text = _chunk(acc_grad="grad_weight.copy_(gw)")
        assert _codes(path, text, ["NPU425", "NPU444"]) == [
            ("NPU425", _line_with(text, "grad_weight.copy_(gw)"))
        ]
        text = _chunk(scale_weight="pass")
        assert _codes(path, text, ["NPU425", "NPU444"]) == [
            ("NPU444", _line_with(text, "return grad_hidden, grad_weight"))
        ]


def test_npu425_accumulator_overwritten_on_one_branch() -> None:
    text = """
    import torch


    def aux_loss_over_layers(gate_logits, num_experts, attention_mask=None):
        total_tokens = torch.tensor(0.0, device=gate_logits[0].device)
        loss = torch.zeros((), device=gate_logits[0].device)
        for layer in gate_logits:
            probs = torch.softmax(layer.float(), dim=-1)
            loss = loss + probs.mean(0).pow(2).sum() * num_experts
            if attention_mask is not None:
                {masked}
            else:
                total_tokens = total_tokens + layer.shape[0]
        return loss / total_tokens
    """
    path = "veomni/distributed/moe/aux_loss.py"
    good = text.replace("{masked}", "total_tokens = total_tokens + attention_mask.sum()")
    assert _codes(path, good, ["NPU425"]) == []
    bad = text.replace("{masked}", "total_tokens = attention_mask.sum()")
    assert _codes(path, bad, ["NPU425"]) == [
        ("NPU425", _line_with(bad, "total_tokens = attention_mask.sum()"))
    ]


# -- NPU412: chunked losses cut the labels and the states they are scored against along one axis --

_CHUNKED = """
import torch


def chunked_{kind}(hidden_states, weight, labels, chunk_size=1024):
    states = {states_split}
    targets = {labels_split}
    total = torch.zeros((), device=hidden_states.device)
    for h, y in zip(states, targets):
        total = total + score(h @ weight.t(), y)
    return total
"""


def test_npu412_chunk_axes_in_other_loss_kernels() -> None:
    variants = [
        (
            "veomni/ops/kernels/cross_entropy/chunk_logprobs.py",
            "logprobs",
            "hidden_states.split(chunk_size, dim=1)",
            "labels.split(chunk_size, dim=1)",
            "labels.split(chunk_size, dim=0)",
        ),
        (
            "veomni/ops/kernels/cross_entropy/chunk_topk_distill.py",
            "distill",
            "torch.split(hidden_states, chunk_size, 1)",
            "torch.split(labels, chunk_size, 1)",
            "torch.split(labels, chunk_size)",
        ),
        (
            "veomni/ops/kernels/kl_div/chunked.py",
            "kl",
            "torch.split(hidden_states, chunk_size, dim=0)",
            "torch.split(labels, chunk_size, dim=0)",
            "torch.split(labels, chunk_size, dim=1)",
        ),
    ]
    for path, kind, states, good, bad in variants:
        text = _CHUNKED.replace("{kind}", kind).replace("{states_split}", states)
        assert _codes(path, text.replace("{labels_split}", good), ["NPU412"]) == [], path
        assert _codes(path, text.replace("{labels_split}", bad), ["NPU412"]) == [
            ("NPU412", _line_with(text, "{labels_split}"))
        ], path


# -- NPU703: where a dummy pass's result goes (never read, added without a zero factor, replacing the stream) --

_JANUS = """
def forward(self, input_ids, inputs_embeds=None, pixel_values=None, **kwargs):
    inputs_embeds = self.embed_tokens(input_ids)
    if pixel_values is not None:
        inputs_embeds = inputs_embeds.masked_scatter(self.mask(input_ids), self.vision(pixel_values))
    elif self.training:
        _, _, info = self.gen_vision_model.dummy_forward()
        fake_indices = info[-1]
        {use}
    return self.language_model(inputs_embeds=inputs_embeds)
"""

_SPEC_DUMMY = """
def toy_vl_model_forward_patched(self, input_ids, inputs_embeds, pixel_values=None, **kwargs):
    if pixel_values is not None:
        image_embeds = self.visual(pixel_values)
        inputs_embeds = inputs_embeds.masked_scatter(self.image_mask(input_ids), image_embeds)
    else:
        fake_vision = self.visual.dummy_forward()
        {use}
    return self.language_model(inputs_embeds=inputs_embeds, **kwargs)
"""

_DECODER = """
def forward(self, input_ids, decoder_inputs=None, **kwargs):
    inputs_embeds = self.embed_tokens(input_ids)
    if decoder_inputs is not None:
        inputs_embeds = self.image_forward(inputs_embeds, decoder_inputs)
    else:
        dummy_embeds, _ = self.image_decoder.lm_dummy_encode()
        {use}
    return self.foundation(inputs_embeds=inputs_embeds)
"""


def test_npu703_dummy_results_in_other_models() -> None:
    janus = "veomni/models/transformers/janus/modeling_janus.py"
    good = "inputs_embeds = inputs_embeds + self.prepare_gen_img_embeds(fake_indices).mean() * 0.0"
    assert _codes(janus, _JANUS.replace("{use}", good), ["NPU703"]) == []
    bad = _JANUS.replace(
        "{use}", "inputs_embeds = inputs_embeds + self.prepare_gen_img_embeds(fake_indices).mean()"
    )
    assert _codes(janus, bad, ["NPU703"]) == [("NPU703", _line_with(_JANUS, "{use}"))]

    spec = "veomni/models/transformers/toy_vl/toy_vl_gpu_patch_gen_config.py"
    good = "inputs_embeds = inputs_embeds + fake_vision.pooler_output.mean() * 0.0"
    assert _codes(spec, _SPEC_DUMMY.replace("{use}", good), ["NPU703"]) == []
    bad = _SPEC_DUMMY.replace("{use}", "inputs_embeds = fake_vision.pooler_output.mean() * 0.0")
    assert ("NPU703", _line_with(_SPEC_DUMMY, "{use}")) in _codes(spec, bad, ["NPU703"])

    decoder = "veomni/models/seed_omni/decoder/movqgan/modeling_movqgan.py"
    good = "inputs_embeds += dummy_embeds.mean() * 0.0"
    assert _codes(decoder, _DECODER.replace("{use}", good), ["NPU703"]) == []
    bad = _DECODER.replace("{use}", "pass")
    assert _codes(decoder, bad, ["NPU703"]) == [("NPU703", _line_with(_DECODER, "lm_dummy_encode"))]
