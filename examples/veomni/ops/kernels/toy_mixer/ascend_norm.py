# NPU432: planted example (see examples/README.md)
import torch
import torch_npu


class ToyRMSNormGated(torch.nn.Module):
    def forward(self, x, gate):
        normed = torch_npu.npu_rms_norm(x, self.weight, self.eps)[0]
        return torch_npu.npu_swiglu(torch.cat((normed, gate), dim=-1), dim=-1)
