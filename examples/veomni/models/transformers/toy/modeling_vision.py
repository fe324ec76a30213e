"""A toy vision tower whose fake input for text-only ranks takes `self.dtype`, the RMSNorm of its patch merger,
and the vision-language wrapper that scatters its features into the text embeddings under sequence parallelism."""

import torch
from torch import nn

from veomni.distributed.parallel_state import get_parallel_state
from veomni.distributed.sequence_parallel import gather_outputs


class ToyMergerRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size))

    def forward(self, patches):
        input_dtype = patches.dtype
        patches = patches.float()
        # NPU410: `var` subtracts the row mean (a LayerNorm statistic); RMSNorm takes `pow(2).mean(-1, keepdim=True)`
        spread = patches.var(-1, keepdim=True)
        patches = patches * torch.rsqrt(spread + self.eps)
        return self.weight * patches.to(input_dtype)


class ToyVisionTower(nn.Module):
    # loaded in bf16, the position table stays in float32 (transformers' keep-in-fp32 list)
    _keep_in_fp32_modules_strict = ["pos_embed"]

    def __init__(self, config):
        super().__init__()
        self.pos_embed = nn.Embedding(config.num_positions, config.hidden_size)
        self.patch_embed = nn.Linear(config.patch_dim, config.hidden_size)
        self.patch_dim = config.patch_dim

    def forward(self, pixel_values):
        hidden_states = self.patch_embed(pixel_values)
        return hidden_states + self.pos_embed.weight[: hidden_states.shape[0]]

    def dummy_forward(self):
        # NPU702: `self.dtype` is the dtype of the first parameter (pos_embed, float32); patch_embed is bf16
        pixel_values = torch.zeros((4, self.patch_dim), dtype=self.dtype, device=self.device)
        return self(pixel_values)


class ToyVisionLanguageModel(nn.Module):
    def __init__(self, config, language_model):
        super().__init__()
        self.visual = ToyVisionTower(config)
        self.language_model = language_model

    def forward(self, input_ids, image_mask, pixel_values=None, **kwargs):
        # under SP, input_ids hold this rank's shard; image_mask (from the collator) covers the whole sequence
        inputs_embeds = self.language_model.embed_tokens(input_ids)
        sp = get_parallel_state()
        if sp.sp_enabled:
            inputs_embeds = gather_outputs(inputs_embeds, gather_dim=1, group=sp.sp_group)
        if pixel_values is not None:
            image_embeds = self.visual(pixel_values).to(inputs_embeds.dtype)
            if sp.sp_enabled:
                image_embeds = gather_outputs(image_embeds, gather_dim=0, group=sp.sp_group)
            inputs_embeds = inputs_embeds.masked_scatter(image_mask.unsqueeze(-1), image_embeds)
        else:
            inputs_embeds = inputs_embeds + 0.0 * self.visual.dummy_forward().sum()
        # NPU706: the full gathered sequence goes on to the language model; this rank's shard is never sliced back
        return self.language_model(inputs_embeds=inputs_embeds, **kwargs)
