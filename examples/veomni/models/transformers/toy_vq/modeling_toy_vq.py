def quantize(self, z):
    idx = torch.cdist(z, self.codebook.weight).argmin(-1)
    z_q = self.codebook(idx)
    z_q = z + (z_q - z)
    return z_q, idx
