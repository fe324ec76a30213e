# ======================================================================
# AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
# Source: transformers.models.qwen3_vl.modeling_qwen3_vl
# Based on: transformers==5.9.0
#
# Patches applied:
#   override_method: Qwen3VLVisionModel.dummy_forward - Fake image for text-only ranks
#   override_method: Qwen3VLVisionModel.rot_pos_emb - Rotary table sized to the largest grid
#   override_method: Qwen3VLModel.forward - Images only; no position-id precompute
#   override_method: Qwen3VLForConditionalGeneration.__init__ - Shorter attribute names
#   override_method: Qwen3VLForConditionalGeneration.forward - Loss on the kept positions
#   override_method: Qwen3VLForConditionalGeneration.get_position_id_func - Precompute positions in the dataloader
# ======================================================================

import torch
from torch import nn

# ======================================================================
# Additional imports for patches
# ======================================================================
from functools import partial
from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel
from veomni.models.position_ids import get_position_id


# ======================================================================
# [MODIFIED CLASS] Qwen3VLVisionModel
# Methods patched: dummy_forward, rot_pos_emb
# ======================================================================
class Qwen3VLVisionModel(nn.Module):
    def dummy_forward(self):
        # not NPU702: upstream Qwen3VLVisionModel registers patch_embed (its input layer) first, so `self.dtype` is
        # the dtype that layer consumes
        pixel_values = torch.zeros((16, 1536), dtype=self.dtype, device=self.device)
        grid_thw = torch.tensor([[1, 4, 4]], device=self.device)
        return self(pixel_values, grid_thw=grid_thw)

    def rot_pos_emb(self, grid_thw):
        # NPU722: the transformers 4 call, a table of `max_hw` rows built from a length: the 5.9 vision rotary
        # module multiplies the position ids it is given by its frequencies
        max_hw = int(grid_thw[:, 1:].max())
        freq_table = self.rotary_pos_emb(max_hw)
        rows, cols = [], []
        for t, h, w in grid_thw.tolist():
            rows.append(torch.arange(h, device=grid_thw.device).repeat_interleave(w).repeat(t))
            cols.append(torch.arange(w, device=grid_thw.device).repeat(h * t))
        pos_ids = torch.stack((torch.cat(rows), torch.cat(cols)), dim=-1)
        return freq_table[pos_ids].flatten(1)


# ======================================================================
# [MODIFIED CLASS] Qwen3VLModel
# Methods patched: forward
# ======================================================================
class Qwen3VLModel(nn.Module):
    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        position_ids=None,
        pixel_values=None,
        image_grid_thw=None,
        **kwargs,
    ):
        inputs_embeds = self.get_input_embeddings()(input_ids)
        if pixel_values is not None:
            image_embeds = self.visual(pixel_values, grid_thw=image_grid_thw).pooler_output
            image_mask = (input_ids == self.config.image_token_id).unsqueeze(-1).expand_as(inputs_embeds)
            inputs_embeds = inputs_embeds.masked_scatter(image_mask, image_embeds.to(inputs_embeds.dtype))
        # NPU703: no `else: self.visual.dummy_forward()` -- a text-only rank skips the tower's FSDP collectives
        # NPU704: the upstream multimodal position ids (compute_3d_position_ids) are never computed
        return self.language_model(
            inputs_embeds=inputs_embeds, attention_mask=attention_mask, position_ids=position_ids, **kwargs
        )


# ======================================================================
# [MODIFIED CLASS] Qwen3VLForConditionalGeneration
# Methods patched: __init__, forward, get_position_id_func
# ======================================================================
class Qwen3VLForConditionalGeneration(nn.Module):
    def __init__(self, config):
        super().__init__(config)
        # NPU705: `model` renamed to `backbone` with no checkpoint key mapping: the checkpoint's `model.*`
        # weights load nowhere
        self.backbone = Qwen3VLModel(config)
        self.lm_head = nn.Linear(config.text_config.hidden_size, config.text_config.vocab_size, bias=False)
        self.post_init()

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        labels=None,
        pixel_values=None,
        pixel_values_videos=None,
        image_grid_thw=None,
        video_grid_thw=None,
        logits_to_keep=0,
        **kwargs,
    ):
        # NPU701: the video inputs are accepted and never passed on: videos are silently ignored
        outputs = self.backbone(
            input_ids=input_ids,
            attention_mask=attention_mask,
            pixel_values=pixel_values,
            image_grid_thw=image_grid_thw,
            **kwargs,
        )
        slice_indices = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        logits = self.lm_head(outputs[0][:, slice_indices, :])
        loss = None
        if labels is not None:
            # NPU415: a VLM config nests the vocabulary size under `text_config`
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size)
        return loss, logits

    def get_position_id_func(self):
        # NPU704: Qwen2-VL's rope index, copied from the model this port started from
        return partial(get_position_id, Qwen2VLModel.get_rope_index, self.model)
