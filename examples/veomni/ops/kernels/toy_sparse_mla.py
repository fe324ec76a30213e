"""A toy sparse-MLA backward wrapper (our own minimal writing for the demo)."""


def toy_sparse_mqa_bwd(q, kv, o, do, lse, sm_scale=None):
    scale = sm_scale if sm_scale is not None else q.shape[-1] ** -0.5
    return q * scale, kv * scale


# NPU317: the wrapper takes the softmax scale and never hands it to the kernel it wraps
def toy_sparse_mla_backward(q, kv, o, do, lse, sm_scale):
    return toy_sparse_mqa_bwd(q, kv, o, do, lse)
