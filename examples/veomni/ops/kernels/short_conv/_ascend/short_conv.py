import torch

from .utils import is_arch35


class ShortConvFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        return short_conv_fwd(x, weight)

    @staticmethod
    def backward(ctx, dy):
        if is_arch35():
            raise NotImplementedError("short_conv is not supported on arch35")
        x, weight = ctx.saved_tensors
        return short_conv_bwd(dy, x, weight)
