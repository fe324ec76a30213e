"""Vendor and device contracts that hold anywhere in a VeOmni tree, on shapes other than the round-15 dev cases
(a backward recomputing its forward's fused kernel with other options; ...): transfer variants in other regions and
names, and correct code that stays quiet."""

from __future__ import annotations

from tests.rules.snippets import lint_snippet


def _lines(code: str, path: str, text: str) -> list[int]:
    return sorted(d.line for d in lint_snippet(path, text, [code]))


# -- NPU315: a backward's recompute of the forward's fused kernel -------------------------------------------------


def test_recompute_autograd_function_torch_npu_layout() -> None:
    text = """
    import torch
    import torch_npu


    class RingAttnFn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, heads):
            out = torch_npu.npu_fusion_attention(q, k, v, heads, input_layout="BSND", sparse_mode=0)[0]
            ctx.save_for_backward(q, k, v)
            return out

        @staticmethod
        def backward(ctx, dout):
            q, k, v = ctx.saved_tensors
            heads = ctx.heads
            out = torch_npu.npu_fusion_attention(q, k, v, heads, input_layout="BNSD", sparse_mode=0)[0]
            return recompute_grads(dout, out), None, None, None
    """
    assert _lines("NPU315", "veomni/distributed/sequence_parallel/ring_npu.py", text) == [8, 16]


def test_recompute_module_pair_torch_ops_chunk_size() -> None:
    text = """
    import torch

    from . import _ops  # noqa: F401


    def segment_reduce_forward(x, offsets):
        return torch.ops.veomni_data.segment_reduce(x, offsets, chunk_size=64, reduce="sum")


    def segment_reduce_backward(dy, x, offsets):
        y = torch.ops.veomni_data.segment_reduce.default(x, offsets, chunk_size=128, reduce="sum")
        return dy * y
    """
    assert _lines("NPU315", "veomni/data/kernels/segment.py", text) == [7, 11]


def test_recompute_generated_like_file_bool_option() -> None:
    text = """
    import torch


    def chunk_linear_attn_fwd(q, k, v, g):
        o = torch.ops.npu.npu_chunk_linear_attn(q, k, v, g, normalize=True, head_first=False)
        return o


    def chunk_linear_attn_bwd(do, q, k, v, g):
        o = torch.ops.npu.npu_chunk_linear_attn(q, k, v, g, normalize=True, head_first=True)
        return torch.ops.npu.npu_chunk_linear_attn_grad(do, o, q, k, v, g)
    """
    assert _lines("NPU315", "veomni/models/transformers/toy_lin/linear_attn_npu.py", text) == [5, 10]


def test_recompute_quiet_when_options_agree_or_only_select_outputs() -> None:
    text = """
    import torch


    def chunk_delta_fwd(k, w, u, g, h0, output_final_state, chunk_size=64):
        return torch.ops.npu.npu_chunk_delta_h(
            k, w, u, g=g, initial_state=h0, output_final_state=output_final_state, save_new_value=True,
            use_exp2=False, chunk_size=chunk_size,
        )


    def chunk_delta_bwd(do, k, w, u, g, h0, chunk_size=64):
        h, v_new, _ = torch.ops.npu.npu_chunk_delta_h(
            k, w, u, g=g, initial_state=h0, output_final_state=False, save_new_value=False,
            use_exp2=False, chunk_size=chunk_size,
        )
        return torch.ops.npu.npu_chunk_delta_bwd(do, h, v_new)
    """
    assert _lines("NPU315", "veomni/ops/kernels/toy_delta/_ascend/delta.py", text) == []


def test_recompute_quiet_for_triton_launch_constants_and_unpaired_functions() -> None:
    text = """
    import torch
    import triton


    def scan_fwd(x):
        y = torch.empty_like(x)
        _scan_fwd_kernel[(x.shape[0],)](x, y, BLOCK=64)
        return torch.ops.veomni.scan(x, exclusive=False)


    def scan_bwd(dy):
        dx = torch.empty_like(dy)
        _scan_bwd_kernel[(dy.shape[0],)](dy, dx, BLOCK=128)
        return torch.ops.veomni.scan(dy.flip(0), exclusive=False).flip(0)


    def cumsum_fwd(x):
        return torch.ops.veomni.scan(x, exclusive=True)
    """
    assert _lines("NPU315", "veomni/ops/kernels/scan/triton_scan.py", text) == []


def test_recompute_quiet_when_backward_reuses_the_kernel_on_gradients() -> None:
    text = """
    import torch
    import torch_npu


    class GroupedLinear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w, group_list):
            ctx.save_for_backward(x, w, group_list)
            return torch_npu.npu_grouped_matmul([x], [w], group_list=group_list, group_type=0, split_item=2)[0]

        @staticmethod
        def backward(ctx, grad):
            x, w, group_list = ctx.saved_tensors
            dx = torch_npu.npu_grouped_matmul([grad], [w.transpose(1, 2)], group_list=group_list, group_type=0, split_item=2)[0]
            dw = torch_npu.npu_grouped_matmul([x.t()], [grad], group_list=group_list, group_type=2, split_item=3)[0]
            return dx, dw, None
    """
    assert _lines("NPU315", "veomni/ops/kernels/moe/toy_group_linear.py", text) == []


# -- NPU103: an allocation that inherits a tensor's device, told to use the host ----------------------------------


def test_host_override_new_method_in_model_code() -> None:
    text = """
    import torch
    from torch import nn


    class ToyGate(nn.Module):
        def forward(self, hidden_states):
            keep = hidden_states.new_ones(hidden_states.shape[:-1], dtype=torch.bool, device=torch.device("cpu"))
            return hidden_states * keep.unsqueeze(-1)
    """
    assert _lines("NPU103", "veomni/models/transformers/toy_gate/modeling_toy_gate.py", text) == [7]


def test_host_override_like_in_distributed_helper() -> None:
    text = """
    import torch
    import torch.distributed as dist


    def reduce_grad_norm(grad, group):
        acc = torch.zeros_like(grad, device="cpu")
        acc.add_(grad.float().pow(2))
        dist.all_reduce(acc, group=group)
        return acc.sqrt()
    """
    assert _lines("NPU103", "veomni/distributed/clip_grad.py", text) == [6]


def test_host_override_new_full_in_optimizer() -> None:
    text = """
    def init_state(param):
        return {"step": param.new_full((), 0.0, device="cpu:0"), "exp_avg": param.new_zeros(param.shape)}
    """
    assert _lines("NPU103", "veomni/optim/toy_adam.py", text) == [2]


def test_host_override_quiet_pinned_data_or_own_device() -> None:
    pinned = """
    import torch


    def offload(param):
        buf = torch.empty_like(param, device="cpu", pin_memory=True)
        buf.copy_(param, non_blocking=True)
        return buf
    """
    assert _lines("NPU103", "veomni/checkpoint/offload.py", pinned) == []
    data = """
    def pad_labels(labels, n):
        return labels.new_full((n,), -100, device="cpu")
    """
    assert _lines("NPU103", "veomni/data/collators/pad.py", data) == []
    own = """
    def empty_bias(weight):
        return weight.new_empty(0, device=weight.device)
    """
    assert _lines("NPU103", "veomni/ops/kernels/toy/utils.py", own) == []


# -- NPU319: the unread probe reported at the file's one device test ----------------------------------------------


def test_unread_probe_reported_at_the_one_device_test() -> None:
    text = """
    from veomni.utils.device import IS_NPU_AVAILABLE


    def pick_allreduce(tensor):
        if tensor.device.type == "cuda" or tensor.is_cuda:
            return "nccl_fused"
        return "plain"
    """
    assert _lines("NPU319", "veomni/distributed/comm_select.py", text) == [5]


def test_unread_probe_reported_at_the_import_when_device_tests_are_many() -> None:
    text = """
    from veomni.utils.device import IS_CUDA_AVAILABLE, get_device_type


    def gate(x, y):
        if x.device.type != get_device_type():
            return None
        assert y.is_cuda
        return x
    """
    assert _lines("NPU319", "veomni/trainer/toy_gate.py", text) == [1]


# -- NPU111: a module built at run time, fed device data, never moved ---------------------------------------------


def test_runtime_module_in_trainer_torch_nn() -> None:
    text = """
    import torch
    from torch import nn


    def distill_step(student, batch, device):
        probe = nn.Linear(1024, 10)
        feats = student(batch["x"].to(device))
        return probe(feats.detach().to(device))
    """
    assert _lines("NPU111", "veomni/trainer/toy_distill.py", text) == [6]


def test_runtime_module_in_data_free_ops_torchaudio() -> None:
    text = """
    import torchaudio


    def resample_to(wave, rate, target, device):
        resampler = torchaudio.transforms.Resample(
            orig_freq=rate,
            new_freq=target,
        )
        return resampler(wave.to(device=device))
    """
    assert _lines("NPU111", "veomni/ops/kernels/toy_audio/resample.py", text) == [7]


def test_runtime_module_in_model_method_own_class() -> None:
    text = """
    import torch
    from torch import nn


    class PatchMixer(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.proj = nn.Linear(dim, dim)


    class ToyVisionTower(nn.Module):
        def build_mixer(self, pixels, dim):
            mixer = PatchMixer(dim)
            return mixer.proj(pixels.npu()).sum()
    """
    assert _lines("NPU111", "veomni/models/transformers/toy_vit/modeling_toy_vit.py", text) == [13]


def test_runtime_module_quiet_when_moved_returned_stored_or_host_only() -> None:
    text = """
    import torch
    from torch import nn


    def moved(x, device):
        m = nn.Linear(4, 4)
        m = m.to(device)
        return m(x.to(device))


    def returned(x, device):
        m = nn.Linear(4, 4)
        return m


    class Owner(nn.Module):
        def lazy_head(self, x, device):
            head = nn.Linear(4, 4)
            self.head = head
            return head(x.to(device))

        def __init__(self):
            super().__init__()
            proj = nn.Linear(4, 4)
            self.out = proj(torch.zeros(4).to("cpu"))


    def host_only(x):
        m = nn.Linear(4, 4)
        return m(x.to("cpu"))
    """
    assert _lines("NPU111", "veomni/models/transformers/toy_mix/modeling_toy_mix.py", text) == []


def test_runtime_module_quiet_for_stateless_losses() -> None:
    text = """
    from torch import nn


    def compute_loss(logits, labels):
        loss_fct = nn.CrossEntropyLoss()
        labels = labels.to(logits.device)
        return loss_fct(logits.view(-1, logits.shape[-1]), labels.to(logits.device).view(-1))
    """
    assert _lines("NPU111", "veomni/models/transformers/toy_lm/modeling_toy_lm.py", text) == []


def test_runtime_module_of_a_vendored_package_in_the_tree(tmp_path) -> None:  # noqa: ANN001
    import textwrap

    from npu_lint.core.config import Settings
    from npu_lint.core.source import SourceFile
    from npu_lint.engine import lint_source
    from npu_lint.veomni.project import load_project

    files = {
        "pyproject.toml": "[project]\nname = 'veomni'\n",
        "veomni/__init__.py": "",
        "veomni/ops/__init__.py": "",
        "veomni/models/diffusers/toy_video/toy_core/blocks.py": """
        import torch
        from torch import nn


        class FrameNorm(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.weight = nn.Parameter(torch.ones(dim))

            def forward(self, x):
                return x * self.weight


        class Config:
            def __init__(self, dim):
                self.dim = dim
        """,
        "veomni/models/diffusers/toy_video/pipeline.py": """
        from toy_core.blocks import Config, FrameNorm


        def normalise(frames, device):
            norm = FrameNorm(64)
            cfg = Config(64)
            return norm(frames.to(device)), cfg(frames.to(device))
        """,
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(textwrap.dedent(text).lstrip("\n"))
    path = tmp_path / "veomni/models/diffusers/toy_video/pipeline.py"
    project = load_project([str(tmp_path)])
    diags = lint_source(SourceFile.from_text(str(path), path.read_text()), ["NPU111"], Settings(), project)
    assert [d.line for d in diags if d.code == "NPU111"] == [5]
