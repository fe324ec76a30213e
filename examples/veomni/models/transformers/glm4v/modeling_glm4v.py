# NPU708: planted example (see examples/README.md)
def take_rank_rows(video_mask, features, sp_rank, sp_size):
    per_rank = video_mask.shape[1] // sp_size
    lo, hi = sp_rank * per_rank, (sp_rank + 1) * per_rank
    video_mask = video_mask[:, lo:hi]
    before = int(video_mask[:, :lo].sum())
    return features[before : before + int(video_mask.sum())]
