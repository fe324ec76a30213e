# NPU709: planted example (see examples/README.md)
import torch


def patch_positions(grid, merge):
    out = []
    for t, rows, cols in grid:
        ys = torch.arange(rows).unsqueeze(1).expand(-1, cols)
        ys = ys.view(rows // merge, merge, cols // merge, merge).permute(0, 2, 1, 3).flatten()
        xs = torch.arange(cols).unsqueeze(0).expand(rows, -1)
        xs = xs.view(rows // merge, merge, cols // merge, merge).flatten()
        out.append(torch.stack([ys, xs], dim=-1).repeat(t, 1))
    return torch.cat(out)
