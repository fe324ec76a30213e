import torch

from veomni.distributed.parallel_state import get_parallel_state
from veomni.distributed.sequence_parallel import gather_outputs, slice_input_tensor


def fill_media(self, input_ids, inputs_embeds, pixel_values):
    state = get_parallel_state()
    if state.sp_enabled:
        inputs_embeds = gather_outputs(inputs_embeds, gather_dim=1, group=state.sp_group)
    image_rows = self.vision_tower(pixel_values)
    if state.sp_enabled:
        image_rows = gather_outputs(image_rows, gather_dim=0, group=state.sp_group)
    mask = (input_ids == self.config.image_token_id).unsqueeze(-1).expand_as(inputs_embeds)
    inputs_embeds = inputs_embeds.masked_scatter(mask, image_rows)
    # NPU706: the gathered sequence is never sliced back to this rank's shard
    return self.text_model(inputs_embeds=inputs_embeds)


class ToyTextCrossAttention(torch.nn.Module):
    def forward(self, x, context, image_context=None, **kwargs):
        # NPU612: the caller's skip_ulysses=True reaches the image call only; the text call runs the all-to-all
        out = self.attn(self.q(x), self.k(context), self.v(context))
        if image_context is not None:
            out = out + self.attn(self.q(x), self.k(image_context), self.v(image_context), **kwargs)
        return self.o(out)
