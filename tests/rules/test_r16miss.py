"""Round 16's missed shapes, each as a contract that holds anywhere in a VeOmni tree: an NPU kernel row gated on
CUDA hardware (NPU215), a kernel's prepared input skipped by one of two sibling calls (NPU312), a q/k norm
statement fed the other side's tensor (NPU465), a checkpoint hook missing from a class its loader equips
(NPU705), a patched method swallowing the ``**kwargs`` its twin and upstream hand on (NPU707), a returned loss
that skips the SP reduction (NPU421), and a missing NPU fallback reported where its entry belongs (NPU212).
Each shape is written in several regions with other names, next to the correct code that must stay quiet."""

from __future__ import annotations

import pytest

from tests.rules.snippets import lint_snippet


def _lines(path: str, text: str, code: str) -> list[int]:
    return [d.line for d in lint_snippet(path, text, [code])]


def _line_of(text: str, needle: str, nth: int = 0) -> int:
    import textwrap

    lines = textwrap.dedent(text).lstrip("\n").splitlines()
    hits = [i + 1 for i, line in enumerate(lines) if needle in line]
    return hits[nth]


# -- NPU215: an NPU-named kernel row declared for CUDA hardware -------------------------------------------------

_KERNEL_ROW = """
from ...kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec


def _factory():
    from .npu import forward

    return forward


KERNEL_REGISTRY.register(
    KernelSpec(
        name="{name}",
        op_name="{op}",
        variant="standard",
        factory=_factory,
        hardware=HardwareRequirement({hw}),
    )
)
"""


@pytest.mark.parametrize(
    "path,name,op,hw",
    [
        ("veomni/ops/kernels/layer_norm/__init__.py", "npu", "layer_norm", 'device_type="cuda"'),
        ("veomni/ops/kernels/moe_experts/__init__.py", "fused_npu", "moe_experts", '"cuda"'),
        ("veomni/ops/kernels/rotary/__init__.py", "npu", "rotary", 'device_type=["cuda"]'),
        ("veomni/ops/kernels/swiglu/__init__.py", "npu_fast", "swiglu", 'device_type="gpu"'),
    ],
)
def test_npu215_npu_row_on_cuda_hardware(path: str, name: str, op: str, hw: str) -> None:
    text = _KERNEL_ROW.format(name=name, op=op, hw=hw)
    assert _lines(path, text, "NPU215") == [_line_of(text, "hardware=")]


@pytest.mark.parametrize(
    "name,hw",
    [("npu", 'device_type="npu"'), ("triton", 'device_type="cuda"'), ("npu", 'device_type="any"')],
)
def test_npu215_quiet(name: str, hw: str) -> None:
    text = _KERNEL_ROW.format(name=name, op="layer_norm", hw=hw)
    assert _lines("veomni/ops/kernels/layer_norm/__init__.py", text, "NPU215") == []


# -- NPU312: one sibling kernel call skips the input the function prepared for it -------------------------------

_ROPE_K_RAW = """
import torch_npu


def forward(q, k, cos, sin, *, unsqueeze_dim=1):
    cos_u = cos.unsqueeze(unsqueeze_dim)
    sin_u = sin.unsqueeze(unsqueeze_dim)
    q_embed = torch_npu.npu_rotary_mul(q, cos_u, sin_u).to(q.dtype)
    k_embed = torch_npu.npu_rotary_mul(k, cos, sin_u).to(k.dtype)
    return (q_embed, k_embed), (cos, sin)
"""
_VIDEO_FREQS_RAW = """
import torch
import torch_npu


class FusedRope:
    def apply(self, x_img, x_txt, freqs):
        freqs_b = freqs.to(x_img.dtype)
        img = torch_npu.npu_rotary_mul(x_img, freqs_b[0], freqs_b[1])
        txt = torch_npu.npu_rotary_mul(x_txt, freqs[0], freqs_b[1])
        return torch.cat([img, txt], dim=1)
"""
_NORM_WEIGHT_RAW = """
from torch_npu import npu_rms_norm


def fused_pair_norm(hidden, residual, weight, eps):
    weight_f = weight.float()
    out_h, _ = npu_rms_norm(hidden, weight_f, epsilon=eps)
    out_r, _ = npu_rms_norm(residual, weight, epsilon=eps)
    return out_h, out_r
"""


@pytest.mark.parametrize(
    "path,text,needle",
    [
        ("veomni/ops/kernels/rope/full/npu.py", _ROPE_K_RAW, "k_embed ="),
        ("veomni/models/diffusers/wan/npu_rope.py", _VIDEO_FREQS_RAW, "txt ="),
        ("veomni/ops/kernels/rms_norm/npu_pair.py", _NORM_WEIGHT_RAW, "out_r,"),
    ],
)
def test_npu312_sibling_call_skips_prepared_input(path: str, text: str, needle: str) -> None:
    found = _lines(path, text, "NPU312")
    assert found == [_line_of(text, needle)]


@pytest.mark.parametrize(
    "text",
    [
        _ROPE_K_RAW.replace("npu_rotary_mul(k, cos, sin_u)", "npu_rotary_mul(k, cos_u, sin_u)"),
        # the raw value handed to a non-kernel helper (the eager fallback, the saved state) is not a kernel input
        """
        import torch_npu
        from . import eager


        def forward(q, k, cos, sin):
            if q.numel() == 0:
                return eager.forward(q, k, cos, sin)
            cos_u = cos.unsqueeze(1)
            return torch_npu.npu_rotary_mul(q, cos_u, sin), (cos, sin)
        """,
        # another kernel at the same position is no sibling
        """
        import torch_npu


        def forward(x, w, cos, sin):
            w_f = w.float()
            y, _ = torch_npu.npu_rms_norm(x, w_f, 1e-6)
            return torch_npu.npu_rotary_mul(y, w, sin)
        """,
    ],
)
def test_npu312_quiet(text: str) -> None:
    assert _lines("veomni/ops/kernels/rope/full/npu.py", text, "NPU312") == []


# -- NPU465: a q/k norm statement fed the other side's tensor ---------------------------------------------------

_ASYNC_BACKWARD = """
import torch
import torch_npu


class _QKNormFn(torch.autograd.Function):
    @staticmethod
    def backward(ctx, *grad_output):
        q, k, norm_q_weight, norm_k_weight, invvar_q, invvar_k = ctx.saved_tensors
        grad_k, grad_norm_k_weight = torch_npu.npu_rms_norm_backward(
            grad_output[1].contiguous(),
            k,
            norm_k_weight,
            invvar_k,
        )
        grad_q, grad_norm_q_weight = torch_npu.npu_rms_norm_backward(
            grad_output[0].contiguous(),
            k,
            norm_q_weight,
            invvar_q,
        )
        return grad_q, grad_k, grad_norm_q_weight, grad_norm_k_weight
"""
_FORWARD_NORM = """
import torch_npu


def fused_qk_norm(query, key, q_norm_weight, k_norm_weight, eps):
    query_out, query_rstd = torch_npu.npu_rms_norm(key, q_norm_weight, eps)
    key_out, key_rstd = torch_npu.npu_rms_norm(key, k_norm_weight, eps)
    return query_out, key_out, query_rstd, key_rstd
"""
_MODULE_NORM = """
class ToyAttention:
    def forward(self, query_states, key_states):
        key_states = self.k_norm(key_states)
        query_states = self.q_norm(key_states)
        return query_states, key_states
"""


@pytest.mark.parametrize(
    "path,text,needle,offset,code",
    [
        # an Ascend kernel's twin call fed the other side's tensor is the vendor twin rule's (NPU315), reported on
        # the crossed argument ...
        (
            "veomni/distributed/sequence_parallel/async_qk.py",
            _ASYNC_BACKWARD,
            "grad_q, grad_norm_q_weight =",
            2,
            "NPU315",
        ),
        ("veomni/ops/kernels/qk_norm/npu.py", _FORWARD_NORM, "query_out, query_rstd =", 0, "NPU315"),
        # ... a module norm fed the other side's tensor is NPU465's
        (
            "veomni/models/seed_omni/foundation/toy/modeling_toy.py",
            _MODULE_NORM,
            "query_states = self.q_norm",
            0,
            "NPU465",
        ),
    ],
)
def test_norm_fed_other_side(path: str, text: str, needle: str, offset: int, code: str) -> None:
    assert _lines(path, text, code) == [_line_of(text, needle) + offset]
    assert _lines(path, text, "NPU465" if code == "NPU315" else "NPU315") == []


@pytest.mark.parametrize(
    "text",
    [
        _ASYNC_BACKWARD.replace(
            "            k,\n            norm_q_weight", "            q,\n            norm_q_weight"
        ),
        _MODULE_NORM.replace("self.q_norm(key_states)", "self.q_norm(query_states)"),
        # a shared read of the other side inside an argument (`q.dtype`) is not the norm's input
        """
        class ToyAttention:
            def forward(self, q, k):
                q = self.q_norm(q.to(q.dtype))
                k = self.k_norm(k.to(q.dtype))
                return q, k
        """,
    ],
)
def test_npu465_quiet(text: str) -> None:
    for code in ("NPU465", "NPU315"):
        assert _lines("veomni/distributed/sequence_parallel/async_qk.py", text, code) == []


# -- NPU705: a class the loader equips lacks the checkpoint hook its siblings get -------------------------------

_LOADER_LOOP = """
from ...loader import MODELING_REGISTRY


def _wrapped_targets(_model, modules, patterns):
    return patterns


def _text_targets(_model, modules, patterns):
    return patterns


@MODELING_REGISTRY.register("toy_vl_moe")
def register_toy_vl_moe_modeling(architecture: str):
    from .checkpoint_tensor_converter import create_toy_converter
    from .generated.patched_modeling_toy_vl_moe_gpu import ToyForConditionalGeneration, ToyModel, ToyTextModel

    for model_cls in ({loop}):
        model_cls._create_checkpoint_tensor_converter = staticmethod(create_toy_converter)
    ToyForConditionalGeneration._convert_lora_targets_to_parameters = staticmethod(_wrapped_targets)
    ToyModel._convert_lora_targets_to_parameters = staticmethod(_wrapped_targets)
    ToyTextModel.{text_hook} = staticmethod(_text_targets)
    if "ForConditionalGeneration" in architecture:
        return ToyForConditionalGeneration
    return ToyModel
"""
_LOADER_SINGLE = """
from ...loader import MODEL_REGISTRY


@MODEL_REGISTRY.register("omni_toy")
def register_omni_toy(architecture: str):
    from .generated.patched_modeling_omni_toy_npu import OmniToyForCausalLM, OmniToyModel, OmniToyTalker

    OmniToyForCausalLM._checkpoint_conversion_mapping = {"^model": "model.thinker"}
    OmniToyModel._checkpoint_conversion_mapping = {"^model": "thinker"}
    OmniToyTalker._keep_in_fp32_modules = ["codec_head"]
    return OmniToyForCausalLM
"""


@pytest.mark.parametrize(
    "path,text,needle",
    [
        (
            "veomni/models/transformers/toy_vl_moe/__init__.py",
            _LOADER_LOOP.format(
                loop="ToyForConditionalGeneration, ToyModel", text_hook="_convert_lora_targets_to_parameters"
            ),
            "for model_cls in",
        ),
        (
            "veomni/models/seed_omni/foundation/toy_vl/__init__.py",
            _LOADER_LOOP.format(loop="ToyForConditionalGeneration, ToyModel", text_hook="_tp_plan_hook"),
            "for model_cls in",
        ),
        ("veomni/models/diffusers/omni_toy/__init__.py", _LOADER_SINGLE, "OmniToyForCausalLM._checkpoint"),
    ],
)
def test_npu705_equipped_class_without_checkpoint_hook(path: str, text: str, needle: str) -> None:
    assert _lines(path, text, "NPU705") == [_line_of(text, needle)]


@pytest.mark.parametrize(
    "text",
    [
        _LOADER_LOOP.format(
            loop="ToyForConditionalGeneration, ToyModel, ToyTextModel",
            text_hook="_convert_lora_targets_to_parameters",
        ),
        # the text model gets no hook of its own and is not returned: the loader does not build it
        _LOADER_LOOP.format(loop="ToyForConditionalGeneration, ToyModel", text_hook="x").replace(
            "    ToyTextModel.x = staticmethod(_text_targets)\n", ""
        ),
        # a hook loading does not read (a split list) given to two classes
        _LOADER_SINGLE.replace("_checkpoint_conversion_mapping", "_no_split_modules"),
    ],
)
def test_npu705_quiet(text: str) -> None:
    assert _lines("veomni/models/transformers/toy_vl_moe/__init__.py", text, "NPU705") == []


# -- NPU707: a patched method swallows the **kwargs its twin and upstream hand to the tower ---------------------

_SPEC = """
import torch
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.{module}", target_file="x.py")


@config.override_method("{cls}.get_image_features")
def image_features_patched(self, pixel_values, image_grid_thw=None, **kwargs):
    pixel_values = pixel_values.type(self.visual.dtype)
    return self.visual(pixel_values, grid_thw=image_grid_thw, {image_tail})


@config.override_method("{cls}.get_video_features")
def video_features_patched(self, pixel_values_videos, video_grid_thw=None, **kwargs):
    pixel_values_videos = pixel_values_videos.type(self.visual.dtype)
    {video_body}
    return self.visual(pixel_values_videos, grid_thw=video_grid_thw, {video_tail})
"""


def _spec(module: str, cls: str, image_tail: str, video_tail: str, video_body: str = "pass") -> str:
    return _SPEC.format(
        module=module, cls=cls, image_tail=image_tail, video_tail=video_tail, video_body=video_body
    )


@pytest.mark.parametrize(
    "path,text,needle",
    [
        (
            "veomni/models/transformers/qwen2_5vl/qwen2_5_vl_gpu_patch_gen_config.py",
            _spec(
                "qwen2_5_vl.modeling_qwen2_5_vl",
                "Qwen2_5_VLModel",
                "return_dict=True, **kwargs",
                "return_dict=True",
            ),
            "grid_thw=video_grid_thw",
        ),
        (
            "veomni/models/transformers/qwen2_vl/qwen2_vl_npu_patch_gen_config.py",
            _spec("qwen2_vl.modeling_qwen2_vl", "Qwen2VLModel", "return_dict=True", "**kwargs"),
            "grid_thw=image_grid_thw",
        ),
        (
            "veomni/models/transformers/qwen2_5_omni/qwen2_5_omni_gpu_patch_gen_config.py",
            _spec(
                "qwen2_5_omni.modeling_qwen2_5_omni",
                "Qwen2_5OmniThinkerForConditionalGeneration",
                "**kwargs",
                "return_dict=True",
            ),
            "grid_thw=video_grid_thw",
        ),
    ],
)
def test_npu707_kwargs_swallowed_beside_twin(path: str, text: str, needle: str) -> None:
    found = [d for d in lint_snippet(path, text, ["NPU707"]) if "**kwargs" in d.message]
    assert [d.line for d in found] == [_line_of(text, needle)]


@pytest.mark.parametrize(
    "text",
    [
        _spec("qwen2_5_vl.modeling_qwen2_5_vl", "Qwen2_5_VLModel", "**kwargs", "**kwargs"),
        # the method reads its keywords (picks one out): a choice, not a loss
        _spec(
            "qwen2_5_vl.modeling_qwen2_5_vl",
            "Qwen2_5_VLModel",
            "**kwargs",
            "return_dict=True",
            video_body='kwargs.pop("cu_seqlens", None)',
        ),
        # no twin hands its keywords to the tower (a simplified training path): upstream alone is no reference
        _spec("qwen2_5_vl.modeling_qwen2_5_vl", "Qwen2_5_VLModel", "return_dict=True", "return_dict=True"),
    ],
)
def test_npu707_kwargs_quiet(text: str) -> None:
    path = "veomni/models/transformers/qwen2_5vl/qwen2_5_vl_gpu_patch_gen_config.py"
    assert [d for d in lint_snippet(path, text, ["NPU707"]) if "**kwargs" in d.message] == []


# -- NPU421: a returned loss under SP that never reaches the SP reduction ---------------------------------------

_CHUNK = """
import torch
from ....distributed.parallel_state import get_parallel_state
from ....distributed.sequence_parallel import reduce_sequence_parallel_loss


def chunk_loss_function(hidden_states, weights, labels, ignore_index=-100, **kwargs):
    sp_enabled = get_parallel_state().sp_enabled
    if not sp_enabled:
        labels = labels[..., 1:].contiguous()

    def ce(h, w, y):
        loss = torch.nn.functional.cross_entropy(h @ w.T, y, reduction="sum")
        return loss

    chunk_loss = ChunkLoss.apply(hidden_states, weights, labels, ce)
    {tail}
    return chunk_loss, None
"""
_TUPLE = """
from veomni.distributed.parallel_state import get_parallel_state
from veomni.distributed.sequence_parallel import reduce_sequence_parallel_loss


def fused_linear_loss(hidden_states, weight, labels, loss_fn, ignore_index=-100):
    if get_parallel_state().sp_enabled:
        labels = labels.contiguous()
    loss, logits = loss_fn(hidden_states, weight, labels)
    {tail}
    return loss, logits
"""
_MODEL = """
from veomni.distributed.parallel_state import get_parallel_state
from veomni.distributed.sequence_parallel import reduce_sequence_parallel_loss


class ToyForCausalLM:
    def compute_image_loss(self, hidden, labels):
        ps = get_parallel_state()
        image_loss = self.image_head_loss(hidden, labels)
        {tail}
        return image_loss
"""


@pytest.mark.parametrize(
    "path,text,needle",
    [
        (
            "veomni/ops/kernels/cross_entropy/chunk_loss.py",
            _CHUNK.format(tail="pass"),
            "return chunk_loss, None",
        ),
        ("veomni/ops/kernels/fused_loss/__init__.py", _TUPLE.format(tail="pass"), "return loss, logits"),
        (
            "veomni/models/seed_omni/decoder/toy/modeling_toy.py",
            _MODEL.format(tail="assert ps.sp_enabled or True"),
            "return image_loss",
        ),
    ],
)
def test_npu421_returned_loss_unreduced(path: str, text: str, needle: str) -> None:
    assert _lines(path, text, "NPU421") == [_line_of(text, needle)]


@pytest.mark.parametrize(
    "text",
    [
        _CHUNK.format(
            tail="if sp_enabled:\n        chunk_loss = reduce_sequence_parallel_loss(chunk_loss, (labels != ignore_index).sum())"
        ),
        _TUPLE.format(
            tail="if get_parallel_state().sp_enabled:\n        loss = reduce_sequence_parallel_loss(loss, (labels != ignore_index).sum())"
        ),
        # no SP state read: the caller reduces
        _MODEL.format(tail="pass"),
    ],
)
def test_npu421_returned_loss_quiet(text: str) -> None:
    assert _lines("veomni/ops/kernels/cross_entropy/chunk_loss.py", text, "NPU421") == []


# -- NPU212: a missing NPU fallback is reported where its entry belongs -----------------------------------------

_FALLBACK = """
from dataclasses import dataclass
from typing import Dict

_NPU_ALLOWED: Dict[str, frozenset] = {
    "attn_implementation": frozenset({"eager", "npu"}),
    "norm_implementation": frozenset({"eager", "npu"}),
    "rope_implementation": frozenset({"eager", "npu"}),
    "loss_implementation": frozenset({"eager", "npu"}),
}
_NPU_DEFAULT_FALLBACK: Dict[str, str] = {
    "attn_implementation": "npu",
    "rope_implementation": "npu",
    "loss_implementation": "npu",
}


@dataclass
class OpsChoices:
    attn_implementation: str = "flash"
    norm_implementation: str = "liger_kernel"
    rope_implementation: str = "liger_kernel"
    loss_implementation: str = "liger_kernel"
"""


def test_npu212_reported_where_the_entry_belongs() -> None:
    text = _FALLBACK
    assert _lines("veomni/arguments/arguments_types.py", text, "NPU212") == [
        _line_of(text, '"rope_implementation": "npu"')
    ]
    complete = text.replace(
        '    "rope_implementation": "npu",\n',
        '    "norm_implementation": "npu",\n    "rope_implementation": "npu",\n',
    )
    assert _lines("veomni/arguments/arguments_types.py", complete, "NPU212") == []
