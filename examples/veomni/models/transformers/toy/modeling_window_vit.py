"""A window-attention vision tower (Qwen2.5-VL shaped): patches reordered into attention windows."""

import torch


def window_vit_forward(self, hidden_states, rotary_pos_emb, window_index, sp_enabled):
    seq_len, _ = hidden_states.size()
    hidden_states = hidden_states.reshape(seq_len // self.spatial_merge_unit, self.spatial_merge_unit, -1)
    hidden_states = hidden_states[window_index, :, :]
    hidden_states = hidden_states.reshape(seq_len, -1)
    rotary_pos_emb = rotary_pos_emb.reshape(seq_len, -1)  # NPU728: the rotary table is not window-permuted
    for blk in self.blocks:
        hidden_states = blk(hidden_states, rotary_pos_emb=rotary_pos_emb)
    merged = self.merger(hidden_states)
    reverse_indices = torch.argsort(window_index)
    if sp_enabled:  # NPU728: the order is restored under sequence parallelism only
        merged = merged[reverse_indices, :]
    return merged
