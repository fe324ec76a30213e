"""A toy omni encoder/decoder under sequence parallelism (demo)."""

import torch
import torch.distributed.nn.functional as distF

from veomni.distributed.parallel_state import get_parallel_state
from veomni.distributed.sequence_parallel import gather_outputs, slice_input_tensor, slice_input_tensor_scale_grad


class ToyOmniEncoder:
    def __init__(self, config):
        self.speech_tower = build_tower(config)
        self.picture_tower = build_tower(config)
        self.picture_proj = build_projector(config)

    def speech_fill(self, inputs_embeds, speech_mask, speech_inputs):
        features = self.speech_tower(speech_inputs)
        # NPU712: scattered into the caller's gathered sequence without a gather of its own
        return inputs_embeds.masked_scatter(speech_mask.unsqueeze(-1), features)

    def forward(self, input_ids, speech_mask=None, speech_inputs=None, picture_mask=None, pictures=None):
        inputs_embeds = self.embed_tokens(input_ids)
        if get_parallel_state().sp_enabled:
            inputs_embeds = gather_outputs(inputs_embeds, gather_dim=1, group=get_parallel_state().sp_group)
        if speech_inputs is not None:
            inputs_embeds = self.speech_fill(inputs_embeds, speech_mask, speech_inputs)
        if pictures is not None:
            picture_embeds = self.picture_proj(self.picture_tower(pictures))
            if get_parallel_state().sp_enabled:
                picture_embeds = gather_outputs(picture_embeds, gather_dim=0, group=get_parallel_state().sp_group)
            inputs_embeds = inputs_embeds.masked_scatter(picture_mask.unsqueeze(-1), picture_embeds)
        elif self.training:
            # NPU715: the dummy pass skips picture_proj, which the real path applies
            inputs_embeds = inputs_embeds + self.picture_tower.dummy_forward().mean() * 0.0
        if get_parallel_state().sp_enabled:
            inputs_embeds = slice_input_tensor(inputs_embeds, dim=1, group=get_parallel_state().sp_group)
        return inputs_embeds


class ToyPatchDecoder:
    def decode(self, hidden_states, patch_labels, patch_mask):
        ps = get_parallel_state()
        if ps.sp_enabled:
            every = torch.cat(distF.all_gather(patch_labels, group=ps.sp_group), dim=0)
            labels = torch.full(patch_mask.shape, -100, dtype=torch.long, device=patch_mask.device)
            labels = labels.masked_scatter(patch_mask, every[: patch_mask.sum()])
            # NPU713: the full-sequence labels are never cut back to this rank's chunk
            return self.head(hidden_states, labels=labels)
        return self.head(hidden_states[patch_mask], labels=patch_labels)


class ToyVideoBlocks:
    def forward(self, latents, context):
        tokens, grid = self.patchify(latents)
        freqs = self.rope_table(grid)
        if get_parallel_state().ulysses_enabled:
            # NPU714: the tokens are sliced, the rotary table built from the full grid is not
            tokens = slice_input_tensor_scale_grad(tokens, dim=1)
        for block in self.blocks:
            tokens = block(tokens, context, freqs)
        return tokens
