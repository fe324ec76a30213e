"""NPU321: a refusal the backward keeps and the forward lost, in kernels other than the dev case (the Ascend
causal convolution's arch35 refusal)."""

from __future__ import annotations

from tests.rules.snippets import lint_snippet


def _lines(text: str, path: str) -> list[int]:
    return sorted(d.line for d in lint_snippet(path, text, ["NPU321"]))


def test_cuda_kernel_function_refuses_non_cuda_only_in_backward() -> None:
    assert _lines(
        """
        import torch

        from veomni.utils.device import IS_CUDA_AVAILABLE


        class FusedLinearCE(torch.autograd.Function):
            @staticmethod
            def forward(ctx, hidden, weight, labels):
                loss, grad = fused_linear_ce_fwd(hidden, weight, labels)
                ctx.save_for_backward(grad)
                return loss

            @staticmethod
            def backward(ctx, grad_output):
                if not IS_CUDA_AVAILABLE:
                    raise RuntimeError("fused linear cross-entropy needs CUDA")
                (grad,) = ctx.saved_tensors
                return grad * grad_output, None, None
        """,
        "veomni/ops/kernels/cross_entropy/fused_linear.py",
    ) == [9]


def test_module_fwd_bwd_pair_soc_refusal() -> None:
    assert _lines(
        """
        import torch_npu

        from .utils import is_910b


        def scan_fwd(x, a):
            return torch_npu.npu_scan(x, a)


        def scan_bwd(dy, x, a):
            if not is_910b():
                raise NotImplementedError("scan backward needs Atlas A2")
            return torch_npu.npu_scan_grad(dy, x, a)
        """,
        "veomni/ops/kernels/scan/npu.py",
    ) == [7]


def test_moe_function_config_refusal() -> None:
    assert _lines(
        """
        import torch


        class GroupGemm(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, w, group_list):
                ctx.save_for_backward(x, w, group_list)
                return gmm(x, w, group_list)

            @staticmethod
            def backward(ctx, dy):
                if get_device_type() != "npu":
                    raise NotImplementedError("the grouped matmul backward is the NPU kernel's")
                return dy, None, None, None
        """,
        "veomni/distributed/moe/group_gemm_fn.py",
    ) == [7]


def test_refusals_in_both_or_on_backward_inputs_stay_quiet() -> None:
    both = """
        import torch

        from .utils import is_arch35


        class ShortConv(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, w):
                if is_arch35():
                    raise NotImplementedError("arch35")
                return conv(x, w)

            @staticmethod
            def backward(ctx, dy):
                if is_arch35():
                    raise NotImplementedError("arch35")
                return dy, None
        """
    assert _lines(both, "veomni/ops/kernels/short_conv/_ascend/conv.py") == []
    inputs = """
        import torch


        class Scale(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.training = True
                return x * 2

            @staticmethod
            def backward(ctx, dy):
                if dy is None:
                    raise RuntimeError("no gradient")
                if not ctx.training:
                    raise RuntimeError("eval only")
                return dy * 2
        """
    assert _lines(inputs, "veomni/ops/kernels/scale/fn.py") == []
