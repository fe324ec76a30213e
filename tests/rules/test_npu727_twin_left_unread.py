"""NPU727: one twin (q/k, image/video, input/output) written in the other's place, the displaced twin left
unread. The bad cases are mutants of real VeOmni functions (a name swapped for its twin); the quiet ones are the
same functions as written, and shapes where an unread twin is deliberate."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source


def _lines(text: str, path: str) -> list[int]:
    src = SourceFile.from_text(path, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, ["NPU727"], Settings()) if d.code == "NPU727")


MOE = "veomni/distributed/moe/comm.py"
ASYNC = "veomni/distributed/sequence_parallel/async_ulysses.py"
DIT = "veomni/distributed/sequence_parallel/async_ulysses_dit.py"
SEED = "veomni/models/seed_omni/modeling_seed_omni.py"

ALL_TO_ALL = """
    def all_to_all_async(group, input, output_split_size, input_split_size):
        return _AllToAll_Async.apply(group, input, output_split_size, {split})
"""

PROJECTION = """
    import torch.nn.functional as F


    def qk_projection(hidden_states, q_weight, k_weight, q_bias, k_bias, norm_q_weight, norm_k_weight):
        q = F.linear(hidden_states, q_weight, q_bias)
        k = F.linear(hidden_states, k_weight, {bias})
        q = layer_norm(q, norm_q_weight)
        k = layer_norm(k, {norm})
        return q, k
"""

MEDIA = """
    def embed_media(self, inputs_embeds, input_ids, pixel_values, pixel_values_videos):
        image_mask = input_ids == self.config.image_token_id
        video_mask = input_ids == self.config.video_token_id
        image_embeds = self.visual(pixel_values)
        video_embeds = self.visual(pixel_values_videos)
        inputs_embeds = inputs_embeds.masked_scatter(image_mask.unsqueeze(-1), image_embeds)
        inputs_embeds = inputs_embeds.masked_scatter({mask}.unsqueeze(-1), video_embeds)
        return inputs_embeds
"""


def test_moe_all_to_all_split_sizes_twice() -> None:
    assert _lines(ALL_TO_ALL.format(split="output_split_size"), MOE) == [2]


def test_async_ulysses_key_takes_query_bias_and_norm() -> None:
    assert _lines(PROJECTION.format(bias="q_bias", norm="norm_k_weight"), DIT) == [6]
    assert _lines(PROJECTION.format(bias="k_bias", norm="norm_q_weight"), ASYNC) == [8]


def test_video_scattered_at_image_positions() -> None:
    assert _lines(MEDIA.format(mask="image_mask"), SEED) == [7]  # the slipped read


def test_quiet_on_the_real_functions() -> None:
    assert _lines(ALL_TO_ALL.format(split="input_split_size"), MOE) == []
    assert _lines(PROJECTION.format(bias="k_bias", norm="norm_k_weight"), DIT) == []
    assert _lines(MEDIA.format(mask="video_mask"), SEED) == []


def test_quiet_when_a_whole_side_or_an_unpacked_field_is_ignored() -> None:
    text = """
        def num_media_tokens(image_sizes=None, video_sizes=None, **kwargs):
            return [h * w // 196 for h, w in image_sizes or []]


        def rms_backward(ctx, grad_output):
            input, weight, output = ctx.saved_tensors
            return grad_output * weight * input


        def backward(ctx, grad_output):
            return all_to_all(grad_output, ctx.input_split_sizes, ctx.output_split_sizes)
    """
    assert _lines(text, "veomni/ops/kernels/toy_norm.py") == []
