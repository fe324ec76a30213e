"""A toy video DiT under Ulysses sequence parallelism (planted bugs for NPU717 and NPU718)."""

from veomni.distributed.parallel_state import get_parallel_state
from veomni.distributed.sequence_parallel import (
    gather_heads_scatter_seq,
    gather_outputs,
    gather_seq_scatter_heads,
    slice_input_tensor,
)


def toy_dit_attention(attn, tokens, rope):
    q, k, v = attn.to_q(tokens), attn.to_k(tokens), attn.to_v(tokens)
    if get_parallel_state().ulysses_enabled:
        q = gather_seq_scatter_heads(q, seq_dim=1, head_dim=2)
        k = gather_seq_scatter_heads(k, seq_dim=1, head_dim=2)
        v = gather_seq_scatter_heads(v, seq_dim=1, head_dim=2)
    out = attn.core(q, k, v, rope)
    if get_parallel_state().ulysses_enabled:
        out = gather_heads_scatter_seq(out, seq_dim=1, head_dim=2)
    return attn.to_out(out.flatten(2))


def toy_dit_forward(self, latents, text, rope):
    tokens = self.patch_embed(latents)
    cos_table, sin_table = rope
    if get_parallel_state().sp_enabled:
        tokens = slice_input_tensor(tokens, dim=1)
        cos_table = slice_input_tensor(cos_table, dim=1)
    # NPU718: the sin table stays full while cos and the tokens are this rank's shard
    rope = (cos_table, sin_table)
    for block in self.blocks:
        tokens = block(tokens, text, rope)
    tokens = self.norm_out(tokens)
    # NPU717: the shard is never gathered back before the output head
    return self.unpatchify(tokens)


def toy_dit_forward_fixed(self, latents, text, rope):
    tokens = self.patch_embed(latents)
    if get_parallel_state().sp_enabled:
        tokens = slice_input_tensor(tokens, dim=1)
        rope = tuple(slice_input_tensor(t, dim=1) for t in rope)
    for block in self.blocks:
        tokens = block(tokens, text, rope)
    if get_parallel_state().sp_enabled:
        tokens = gather_outputs(tokens, gather_dim=1)
    return self.unpatchify(self.norm_out(tokens))

