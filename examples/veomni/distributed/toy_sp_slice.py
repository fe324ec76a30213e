# NPU625: this rank's share taken with a list of per-dimension slices instead of a tuple
def slice_input_tensor(x, dim, sp_size, sp_rank):
    unit = x.size(dim) // sp_size
    slc = [slice(None)] * len(x.shape)
    slc[dim] = slice(unit * sp_rank, unit * (sp_rank + 1))
    return x[slc].clone()
