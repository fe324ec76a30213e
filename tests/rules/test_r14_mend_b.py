"""Round 14 review (semantics): false positives of the widened loss, kernel and multimodal checks, each
pinned on the reviewer's reproducer."""

from __future__ import annotations

from tests.rules.snippets import lint_snippet


def _codes(path: str, text: str, codes: list[str]) -> list[tuple[str, int]]:
    return sorted((d.code, d.line) for d in lint_snippet(path, text, codes))


_LOOP = "veomni/trainer/loop.py"

_REDUCED_GLOBALS = """
import torch
import torch.distributed as dist


def count(batch, group):
    num_tokens = (batch["labels"] != -100).sum()
    global_num_tokens = num_tokens.clone()
    dist.all_reduce(global_num_tokens, group=group)
    return global_num_tokens


def count2(self, batch):
    self.num_tokens = (batch["labels"] != -100).sum()
    # single-process evaluation: the rank's count is the job's
    if self.world_size == 1:
        self.global_num_tokens = self.num_tokens
    return self.global_num_tokens


def count4(batch):
    tokens = (batch["labels"] != -100).sum()
    global_tokens = tokens.detach().clone()
    dist.all_reduce(global_tokens, op=dist.ReduceOp.SUM)
    return global_tokens


def log_loss(loss, group):
    global_loss = loss.detach().clone()
    dist.all_reduce(global_loss, op=dist.ReduceOp.AVG, group=group)
    return global_loss.item()


def tokens_per_expert(routing, ep_group, ep_size):
    num_tokens_per_expert = torch.bincount(routing)
    if ep_group is None or ep_size <= 1:
        global_num_tokens_per_expert = num_tokens_per_expert
    else:
        global_num_tokens_per_expert = all_gather(num_tokens_per_expert, ep_group)
    return global_num_tokens_per_expert
"""


def test_npu423_value_reduced_afterwards_or_taken_on_one_process() -> None:
    assert _codes(_LOOP, _REDUCED_GLOBALS, ["NPU423"]) == []
    bad = """
    def count(batch):
        num_tokens = (batch["labels"] != -100).sum()
        global_num_tokens = num_tokens.clone()
        print(global_num_tokens)
        return global_num_tokens


    def count2(self, batch):
        self.num_tokens = (batch["labels"] != -100).sum()
        if self.world_size > 1:
            self.global_num_tokens = self.num_tokens
        return self.global_num_tokens
    """
    assert _codes(_LOOP, bad, ["NPU423"]) == [("NPU423", 3), ("NPU423", 11)]


_RESET_AND_SEED = """
import torch


def train(model, loader, optimizer, log_every, device):
    total_loss = torch.tensor(0.0, device=device)
    for step, batch in enumerate(loader):
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        total_loss += loss.detach()
        if step % log_every == 0:
            print(total_loss.item() / log_every)
            total_loss = torch.tensor(0.0, device=device)


def grad_accum(model, micro_batches):
    loss_sum = torch.zeros((), device="cuda")
    for i, mb in enumerate(micro_batches):
        loss = model(**mb).loss
        if i == 0:
            loss_sum = loss.detach()
        else:
            loss_sum = loss_sum + loss.detach()
    return loss_sum
"""


def test_npu425_interval_reset_and_first_iteration_seed_are_not_overwrites() -> None:
    assert _codes(_LOOP, _RESET_AND_SEED, ["NPU425"]) == []
    bad = _RESET_AND_SEED.replace("if i == 0:", "if i == 1:")
    assert _codes(_LOOP, bad, ["NPU425"]) == [("NPU425", 21)]


_CHUNK_CE = "veomni/ops/loss/chunk_ce.py"

_INPLACE_SCALE = """
import torch


class ChunkedCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden_states, weight, labels, chunk_size):
        grad_w = torch.zeros_like(weight)
        grad_h = []
        loss = torch.zeros((), device=hidden_states.device)
        for h, l in zip(hidden_states.split(chunk_size, dim=0), labels.split(chunk_size, dim=0)):
            logits = h @ weight.t()
            loss = loss + torch.nn.functional.cross_entropy(logits, l, reduction="sum")
        ctx.save_for_backward(torch.cat(grad_h), grad_w)
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        grad_input, grad_weight = ctx.saved_tensors
        grad_weight.mul_(grad_output)  # in place: the weight gradient is large
        grad_input = grad_input * grad_output
        return grad_input, grad_weight, None, None
"""


def test_npu444_in_place_scale_counts_as_scaled() -> None:
    assert _codes(_CHUNK_CE, _INPLACE_SCALE, ["NPU444"]) == []
    bad = _INPLACE_SCALE.replace("grad_weight.mul_(grad_output)", "grad_weight.mul_(2.0)")
    assert _codes(_CHUNK_CE, bad, ["NPU444"]) == [("NPU444", 21)]


_SEQ_FIRST = """
import torch


class ChunkedCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden_states, weight, labels, chunk_size):
        # hidden_states is sequence-first (T, B, H) as the pipeline stage emits it; labels are (B, T)
        loss = torch.zeros((), device=hidden_states.device)
        for h, l in zip(hidden_states.split(chunk_size, dim=0), labels.split(chunk_size, dim=1)):
            logits = h @ weight.t()
            loss = loss + torch.nn.functional.cross_entropy(logits.flatten(0, 1), l.t().flatten())
        return loss
"""

_SPLIT_APART = """
import torch


def chunk_states(hidden_states, chunk_size):
    return hidden_states.split(chunk_size, dim=0)


def chunk_labels(labels, chunk_size):
    return labels.split(chunk_size, dim=1)
"""


def test_npu412_sequence_first_layout_and_splits_in_other_functions() -> None:
    assert _codes(_CHUNK_CE, _SEQ_FIRST, ["NPU412"]) == []
    assert _codes(_CHUNK_CE, _SPLIT_APART, ["NPU412"]) == []
    bad = _SEQ_FIRST.replace("l.t().flatten()", "l.flatten()")
    assert _codes(_CHUNK_CE, bad, ["NPU412"]) == [("NPU412", 9)]


_NORM_PRESERVING = """
import torch
from torch import nn


class NormPreserving(nn.Module):
    def forward(self, x):
        norm = x.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt()
        x = x / norm
        x = self.proj(x)
        return x * norm
"""


def test_npu410_normalise_process_restore_is_not_a_reversed_norm() -> None:
    path = "veomni/models/transformers/toy/modeling_toy.py"
    assert _codes(path, _NORM_PRESERVING, ["NPU410"]) == []
    bad = _NORM_PRESERVING.replace(
        "        x = x / norm\n        x = self.proj(x)\n", "        x = x.float()\n"
    )
    assert _codes(path, bad, ["NPU410"]) == [("NPU410", 9)]


_INTERNVL = """
def build_processor_kwargs(args):
    image_kwargs = {"max_patches": args.max_dynamic_patch, "crop_to_patches": True, "size": args.image_size}
    video_kwargs = {"num_frames": args.num_frames, "size": args.image_size}
    return {"images_kwargs": image_kwargs, "videos_kwargs": video_kwargs}


def process(processor, images, videos, pixel_values=None):
    image_inputs = {"pixel_values": processor(images=images)["pixel_values"], "image_flags": [1] * len(images)}
    video_inputs = {"pixel_values_videos": processor(videos=videos)["pixel_values_videos"]}
    return image_inputs, video_inputs
"""


def test_npu720_image_only_options_are_not_missing_from_the_video_bundle() -> None:
    path = "veomni/data/multimodal/internvl_preprocess.py"
    assert _codes(path, _INTERNVL, ["NPU720"]) == []
    grid = _INTERNVL.replace('"image_flags": [1] * len(images)', '"image_grid_thw": grid')
    assert _codes(path, grid, ["NPU720"]) == [("NPU720", 9)]
    flags = _INTERNVL.replace(
        "return image_inputs, video_inputs", "return image_inputs, video_inputs, video_flags"
    )
    assert _codes(path, flags, ["NPU720"]) == [("NPU720", 9)]


_DELEGATING_STAGE = """
import torch


def _index3d(input_ids, image_grid_thw):
    ids = torch.arange(input_ids.shape[-1]).expand(3, -1)
    return {"position_ids": ids}


def prepare_ids(features, image_grid_thw=None):
    features.update(_index3d(features["input_ids"], image_grid_thw))
    return features


class ToyVLForConditionalGeneration:
    def get_position_id_func(self):
        return [prepare_ids]
"""


def test_npu704_stage_delegating_to_a_local_helper_writes_positions() -> None:
    path = "veomni/models/transformers/toy_vl/modeling_toy_vl.py"
    assert _codes(path, _DELEGATING_STAGE, ["NPU704"]) == []
    bad = _DELEGATING_STAGE.replace('return {"position_ids": ids}', 'return {"input_ids": ids}')
    assert _codes(path, bad, ["NPU704"]) == [("NPU704", 16)]


def test_npu423_a_batch_size_of_one_is_not_a_single_process_job() -> None:
    text = """
    def count(self, batch):
        self.num_tokens = (batch["labels"] != -100).sum()
        if self.micro_batch_size == 1:
            self.global_num_tokens = self.num_tokens
        return self.global_num_tokens
    """
    assert _codes(_LOOP, text, ["NPU423"]) == [("NPU423", 4)]
