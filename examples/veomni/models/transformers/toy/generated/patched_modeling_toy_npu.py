# NPU214: planted example (see examples/README.md)
import torch
from veomni.ops.dispatch import OpSlot

veomni_rope = OpSlot("rotary_pos_emb", "full")


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    if veomni_rope.use_non_eager_impl:
        return veomni_rope(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    width = cos.shape[-1]
    q_rot, q_keep = q[..., :width], q[..., width:]
    k_rot, k_keep = k[..., :width], k[..., width:]
    q_rot = q_rot * cos + rotate_half(q_rot) * sin
    k_rot = k_rot * cos + rotate_half(k_rot) * sin
    return torch.cat([q_rot, q_keep], dim=-1), torch.cat([k_rot, k_keep], dim=-1)


# NPU430: the unweighted norm below is bound to the weighted `standard` variant
veomni_plain_norm = OpSlot("rms_norm", "standard")


class ToyPlainNorm(torch.nn.Module):
    def __init__(self, eps=1e-6):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        if veomni_plain_norm.use_non_eager_impl:
            return veomni_plain_norm(x, None, self.eps)
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps).to(x.dtype)
