"""Precision review rev19: correct variants in VeOmni's shapes that the reviewed rules reported; each must stay
quiet (and the rules' true positives keep reporting: their own dev tests and the paired tests here)."""

from __future__ import annotations

import pytest

from tests.rules.snippets import lint_snippet

# -- NPU412: the caller's shift_labels read in a `try` body, the labels shifted in its handler -----------------
_LOSS_412 = """
from torch import nn
from ....distributed.parallel_state import get_parallel_state


def ForCausalLMLoss(logits, labels, vocab_size, num_items_in_batch=None, ignore_index=-100, shift_labels=None, **kw):
    sp_enabled = get_parallel_state().sp_enabled
{body}
    return nn.functional.cross_entropy(logits.view(-1, vocab_size), shift_labels.view(-1), ignore_index=ignore_index)
"""
_SHIFT_412 = "nn.functional.pad(labels, (0, 1), value=ignore_index)[..., 1:].contiguous()"


def test_npu412_shift_labels_read_in_the_try_body() -> None:
    body = f"""    try:
        shift_labels = shift_labels.contiguous()
    except AttributeError:
        shift_labels = labels if sp_enabled else {_SHIFT_412}"""
    text = _LOSS_412.format(body=body)
    assert lint_snippet("veomni/ops/kernels/cross_entropy/__init__.py", text, ["NPU412"]) == []


def test_npu412_shift_over_the_given_labels_still_reports() -> None:
    body = f"""    try:
        n = labels.numel()
    except AttributeError:
        n = 0
    shift_labels = labels if sp_enabled or not n else {_SHIFT_412}"""
    text = _LOSS_412.format(body=body)
    found = lint_snippet("veomni/ops/kernels/cross_entropy/__init__.py", text, ["NPU412"])
    assert [d.code for d in found] == ["NPU412"]


# -- NPU719: one call (or dict) per medium; a medium the function only refuses ---------------------------------
_PER_MEDIUM_719 = {
    "dicts": """
def split_media(batch, image_token_id, video_token_id):
    ids = batch["input_ids"]
    image_inputs = {"pixel_values": batch["pixel_values"], "image_grid_thw": batch["image_grid_thw"]}
    video_inputs = {"pixel_values_videos": batch["pixel_values_videos"], "video_grid_thw": batch["video_grid_thw"]}
    return image_inputs, video_inputs, ids == image_token_id, ids == video_token_id
""",
    "calls": """
def token_counts(processor, model_inputs):
    merge = processor.image_processor.merge_size
    image_num = _token_num(image_grid_thw=model_inputs.get("image_grid_thw"), merge_size=merge)
    video_num = _token_num(video_grid_thw=model_inputs.get("video_grid_thw"), merge_size=merge)
    return {"image": image_num, "video": video_num}
""",
    "dict_calls": """
def collect(batch, encoders):
    out = {}
    out["image"] = dict(image_grid_thw=batch.get("image_grid_thw"), pixel_values=batch.get("pixel_values"))
    out["video"] = dict(video_grid_thw=batch.get("video_grid_thw"), pixel_values_videos=batch.get("pixel_values_videos"))
    return out
""",
    "branches": """
def encode(sample, processor, position_id_func):
    model_inputs = processor(text=sample["text"], images=sample.get("images"), videos=sample.get("videos"))
    if sample.get("videos"):
        pos = position_id_func(input_ids=model_inputs["input_ids"], video_grid_thw=model_inputs["video_grid_thw"])
    else:
        pos = position_id_func(input_ids=model_inputs["input_ids"], image_grid_thw=model_inputs.get("image_grid_thw"))
    return pos
""",
    "refused": """
def encode(model_inputs, position_id_func):
    if "pixel_values_videos" in model_inputs:
        raise NotImplementedError("this model takes images only")
    return position_id_func(
        input_ids=model_inputs["input_ids"],
        image_grid_thw=model_inputs.get("image_grid_thw"),
        attention_mask=model_inputs["attention_mask"],
    )
""",
}


@pytest.mark.parametrize("shape", sorted(_PER_MEDIUM_719))
def test_npu719_one_call_per_medium_or_refused(shape: str) -> None:
    assert lint_snippet("veomni/data/data_transform.py", _PER_MEDIUM_719[shape], ["NPU719"]) == []


def test_npu719_twin_grid_passed_to_another_receiver_still_reports() -> None:
    text = """
def encode(model_inputs, position_id_func):
    video_mask = model_inputs["input_ids"] == 151656
    pos = position_id_func(
        input_ids=model_inputs["input_ids"],
        image_grid_thw=model_inputs.get("image_grid_thw"),
        attention_mask=model_inputs["attention_mask"],
    )
    return dict(position_ids=pos, video_grid_thw=model_inputs.get("video_grid_thw"), video_mask=video_mask)
"""
    found = lint_snippet("veomni/data/data_transform.py", text, ["NPU719"])
    assert [(d.code, d.line) for d in found][:1] == [("NPU719", 5)]


# -- NPU309: a rotary helper whose table arrives with its head axis (from the caller, or as a sibling shows) ------
_ROPE_309 = {
    # the real vision wrapper with its batch-axis rotation extracted into a helper; the caller adds the head axis
    "helper": """
import torch_npu


def _rotate(x, cos, sin):
    return torch_npu.npu_rotary_mul(x.unsqueeze(0), cos.unsqueeze(0), sin.unsqueeze(0)).squeeze(0)


def apply_rotary_pos_emb_vision_npu(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    cos, sin = cos.unsqueeze(-2).float(), sin.unsqueeze(-2).float()
    return _rotate(q, cos, sin), _rotate(k, cos, sin)
""",
    # MLA: the shared rope key has no head axis either; the query's rotation shows the table's rank is right
    "mla": """
import torch_npu


def apply_rotary_mla(q_pe, k_pe, cos, sin):
    cos = cos.unsqueeze(1)
    sin = sin.unsqueeze(1)
    q_pe = torch_npu.npu_rotary_mul(q_pe, cos, sin)
    k_pe = torch_npu.npu_rotary_mul(k_pe.unsqueeze(1), cos, sin)
    return q_pe, k_pe
""",
}


@pytest.mark.parametrize("shape", sorted(_ROPE_309))
def test_npu309_table_arrives_with_its_head_axis(shape: str) -> None:
    assert lint_snippet("veomni/ops/kernels/rotary/npu.py", _ROPE_309[shape], ["NPU309"]) == []


def test_npu309_table_one_rank_short_still_reports() -> None:
    text = _ROPE_309["helper"].replace(
        "cos.unsqueeze(-2).float(), sin.unsqueeze(-2).float()", "cos.float(), sin.float()"
    )
    found = lint_snippet("veomni/ops/kernels/rotary/npu.py", text, ["NPU309"])
    assert [d.code for d in found] == ["NPU309"]


# -- NPU315: the forward stashes its group list, then rebinds the name to another layout for its own call -------
_GMM_315 = """
import torch
import torch_npu


class ExpertMatmul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, group_list):
        {stash}
        {rebind}
        return torch_npu.npu_grouped_matmul([x], [w], group_list=group_list, group_list_type={fwd})[0]

    @staticmethod
    def backward(ctx, grad):
        {take}
        dx = torch_npu.npu_grouped_matmul([grad], [w.transpose(1, 2)], group_list=group_list, group_list_type=1)[0]
        return dx, None, None
"""
_STASHES_315 = {
    "attribute": (
        "ctx.save_for_backward(x, w)\n        ctx.group_list = group_list",
        "x, w = ctx.saved_tensors\n        group_list = ctx.group_list",
    ),
    "saved": ("ctx.save_for_backward(x, w, group_list)", "x, w, group_list = ctx.saved_tensors"),
}


@pytest.mark.parametrize("kind", sorted(_STASHES_315))
def test_npu315_forward_rebinds_the_stashed_name(kind: str) -> None:
    stash, take = _STASHES_315[kind]
    text = _GMM_315.format(
        stash=stash, rebind="group_list = torch.cumsum(group_list, dim=0)", fwd=0, take=take
    )
    assert lint_snippet("veomni/distributed/moe/expert_gmm.py", text, ["NPU315"]) == []


@pytest.mark.parametrize("kind", sorted(_STASHES_315))
def test_npu315_stashed_after_a_same_layout_rebinding_still_reports(kind: str) -> None:
    stash, take = _STASHES_315[kind]
    text = _GMM_315.format(stash="group_list = group_list.to(torch.int64)", rebind=stash, fwd=0, take=take)
    found = lint_snippet("veomni/distributed/moe/expert_gmm.py", text, ["NPU315"])
    assert [d.code for d in found] == ["NPU315"]


# -- NPU317: a knob the caller vets before handing it on; a helper also chosen as a value (one signature) --------
_HELPERS_317 = {
    "refused": """
import torch
import torch_npu


def _npu_attention(q, k, v, scale, window_size):
    mask = torch.triu(torch.ones(q.shape[1], k.shape[1], dtype=torch.bool, device=q.device), diagonal=1)
    return torch_npu.npu_fusion_attention(q, k, v, q.shape[2], "BSND", atten_mask=mask, scale=scale, sparse_mode=3)[0]


def flash_attention_forward(q, k, v, softmax_scale=None, sliding_window=None):
    if sliding_window is not None:
        raise NotImplementedError("sliding window attention is not supported on Ascend")
    scale = softmax_scale if softmax_scale is not None else q.shape[-1] ** -0.5
    return _npu_attention(q, k, v, scale, sliding_window)
""",
    "asserted": """
import torch_npu


def _rotate(x, cos, sin, interleaved):
    return torch_npu.npu_rotary_mul(x, cos, sin)


def apply_rotary(q, k, cos, sin, interleaved=False):
    assert not interleaved, "the fused Ascend kernel rotates halves"
    return _rotate(q, cos, sin, interleaved), _rotate(k, cos, sin, interleaved)
""",
    "one_signature": """
import torch
import torch_npu


def _fused(hidden_states, weight, eps, upcast):
    return torch_npu.npu_rms_norm(hidden_states, weight, epsilon=eps)[0]


def _eager(hidden_states, weight, eps, upcast):
    x = hidden_states.float() if upcast else hidden_states
    return (weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))).to(hidden_states.dtype)


def rms_norm_forward(hidden_states, weight, eps, upcast=True, fused=True):
    impl = _fused if fused else _eager
    return impl(hidden_states, weight, eps, upcast) if fused is not None else _fused(hidden_states, weight, eps, upcast)
""",
}


@pytest.mark.parametrize("shape", sorted(_HELPERS_317))
def test_npu317_knob_vetted_by_the_caller_or_one_signature(shape: str) -> None:
    assert lint_snippet("veomni/ops/kernels/attention/npu.py", _HELPERS_317[shape], ["NPU317"]) == []


def test_npu317_knob_vetted_by_another_function_still_reports() -> None:
    text = (
        _HELPERS_317["asserted"].replace(
            '    assert not interleaved, "the fused Ascend kernel rotates halves"\n', ""
        )
        + "\n\ndef check(interleaved):\n    assert not interleaved\n"
    )
    found = lint_snippet("veomni/ops/kernels/attention/npu.py", text, ["NPU317"])
    assert [d.code for d in found] == ["NPU317"]


# -- NPU409: one kernel serving the standard and the offset rows through a flag the offset row binds ------------
_REG_409 = """
import functools

from ....registry import register_op
from .npu import rms_norm_npu

register_op("rms_norm", "standard", "npu", rms_norm_npu, None)
register_op("rms_norm", "qwen3_5", "npu", functools.partial(rms_norm_npu, zero_centered=True), None)
"""
_KERNEL_409 = """
import torch_npu


def rms_norm_npu(x, weight, eps, zero_centered=False):
    w = {weight}
    return torch_npu.npu_rms_norm(x, w, eps)[0]
"""


def _lines_409(tmp_path, kernel: str) -> list[int]:
    from tests.rules.test_r17_vendor_kernel_contracts import _lines

    files = {
        "veomni/ops/kernels/norms/rms_norm/__init__.py": _REG_409,
        "veomni/ops/kernels/norms/rms_norm/npu.py": kernel,
    }
    return _lines(tmp_path, files, "veomni/ops/kernels/norms/rms_norm/npu.py", "NPU409")


def test_npu409_flag_guarded_offset_serves_both_rows(tmp_path) -> None:
    kernel = _KERNEL_409.format(
        weight="weight.float().add(1.0).to(weight.dtype) if zero_centered else weight"
    )
    assert _lines_409(tmp_path, kernel) == []


def test_npu409_unconditional_offset_on_the_standard_row_still_reports(tmp_path) -> None:
    kernel = _KERNEL_409.format(weight="weight.float().add(1.0).to(weight.dtype)")
    assert _lines_409(tmp_path, kernel) == [6]


# -- NPU719: a dict that gets the twin medium's entries after its display ---------------------------------------
_FILLED_719 = {
    "subscript": """
def forward_step(self, batch):
    mm = dict(image_grid_thw=batch.get("image_grid_thw"), pixel_values=batch.get("pixel_values"))
    mm["video_grid_thw"] = batch.get("video_grid_thw")
    mm["pixel_values_videos"] = batch.get("pixel_values_videos")
    return self.model(input_ids=batch["input_ids"], **mm)
""",
    "update": """
def forward_step(self, batch):
    mm = dict(image_grid_thw=batch.get("image_grid_thw"), pixel_values=batch.get("pixel_values"))
    mm.update(video_grid_thw=batch.get("video_grid_thw"), pixel_values_videos=batch.get("pixel_values_videos"))
    return self.model(input_ids=batch["input_ids"], **mm)
""",
    "conditional": """
def forward_step(self, batch):
    kwargs = {"pixel_values": batch.get("pixel_values"), "image_grid_thw": batch.get("image_grid_thw")}
    if "pixel_values_videos" in batch:
        kwargs["pixel_values_videos"] = batch["pixel_values_videos"]
        kwargs["video_grid_thw"] = batch["video_grid_thw"]
    return self.model(input_ids=batch["input_ids"], **kwargs)
""",
}


@pytest.mark.parametrize("shape", sorted(_FILLED_719))
def test_npu719_twin_entries_added_to_the_dict_later(shape: str) -> None:
    assert lint_snippet("veomni/trainer/vlm_trainer.py", _FILLED_719[shape], ["NPU719"]) == []


def test_npu719_dict_completed_with_other_entries_still_reports() -> None:
    text = _FILLED_719["subscript"].replace('mm["video_grid_thw"]', 'mm["attention_mask"]')
    text = text.replace('batch.get("video_grid_thw")', 'batch.get("attention_mask")')
    found = lint_snippet("veomni/trainer/vlm_trainer.py", text, ["NPU719"])
    assert [(d.code, d.line) for d in found][:1] == [("NPU719", 2)]


# -- NPU409: an offset kernel on the offset row spelling `1 + weight` as an augmented assignment or in a helper ---
_OFFSET_BODIES_409 = {
    "augmented": "def centered_norm_npu(x, gamma, eps):\n    g = gamma.float()\n    g += 1.0\n"
    "    return torch_npu.npu_rms_norm(x, g.to(x.dtype), eps)[0]\n",
    "helper": "def _centered(w):\n    return 1.0 + w.float()\n\n\ndef centered_norm_npu(x, gamma, eps):\n"
    "    return torch_npu.npu_rms_norm(x, _centered(gamma).to(x.dtype), eps)[0]\n",
}


@pytest.mark.parametrize("shape", sorted(_OFFSET_BODIES_409))
def test_npu409_offset_spelled_by_augmented_assignment_or_helper(tmp_path, shape: str) -> None:
    from tests.rules.test_r17_vendor_kernel_contracts import _lines, _offset_kernel

    files = _offset_kernel(_OFFSET_BODIES_409[shape])
    assert _lines(tmp_path, files, "veomni/ops/kernels/norms/rms_norm/npu.py", "NPU409") == []


def test_npu409_plain_kernel_on_the_offset_row_still_reports(tmp_path) -> None:
    from tests.rules.test_r17_vendor_kernel_contracts import _lines, _offset_kernel

    body = "def centered_norm_npu(x, gamma, eps):\n    g = gamma.float()\n    return torch_npu.npu_rms_norm(x, g, eps)[0]\n"
    assert _lines(tmp_path, _offset_kernel(body), "veomni/ops/kernels/norms/rms_norm/npu.py", "NPU409") == [7]
