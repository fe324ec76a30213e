# NPU324: the arch35 arm passes `chunk_indices=`, which only the triton_core generation takes, but the import
# below lost its `if is_arch35():` switch
from .triton.cumsum import chunk_cumsum, is_arch35


def local_cumsum(g, cu_seqlens, chunk_indices):
    if is_arch35():
        return chunk_cumsum(g, cu_seqlens=cu_seqlens, chunk_indices=chunk_indices)
    return chunk_cumsum(g, cu_seqlens=cu_seqlens)
