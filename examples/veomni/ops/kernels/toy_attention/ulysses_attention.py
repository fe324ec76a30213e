# NPU628: the input all-to-all ignores `skip_ulysses`, which the output all-to-all honours
from veomni.distributed.parallel_state import get_parallel_state
from veomni.distributed.sequence_parallel import gather_heads_scatter_seq, gather_seq_scatter_heads


def toy_attention_forward(query, key, value, kernel, skip_ulysses: bool = False):
    ulysses_enabled = get_parallel_state().ulysses_enabled
    if ulysses_enabled:
        query = gather_seq_scatter_heads(query, seq_dim=1, head_dim=2)
        key = gather_seq_scatter_heads(key, seq_dim=1, head_dim=2)
        value = gather_seq_scatter_heads(value, seq_dim=1, head_dim=2)
    out = kernel(query, key, value)
    if ulysses_enabled and not skip_ulysses:
        out = gather_heads_scatter_seq(out, seq_dim=1, head_dim=2)
    return out
