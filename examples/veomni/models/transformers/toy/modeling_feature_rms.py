# NPU467: a per-token RMS of [B, T, D, L] features taken over the layer axis L instead of the hidden axis D.
import torch


def per_token_rms(encoded_text):
    B, T, D, L = encoded_text.shape  # noqa: N806
    variance = torch.mean(encoded_text**2, dim=-1, keepdim=True)
    return (encoded_text * torch.rsqrt(variance + 1e-6)).reshape(B, T, D * L)
