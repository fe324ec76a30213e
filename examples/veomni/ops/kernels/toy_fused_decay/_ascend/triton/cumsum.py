def is_arch35():
    return False


def chunk_cumsum(g, cu_seqlens=None):
    return g.cumsum(1)
