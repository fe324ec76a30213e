"""NPU314: an Ascend adapter adds an axis to a parameter for the kernel (``q.unsqueeze(0)``) and returns the
kernel's output through rank-keeping calls only (a ``transpose`` instead of the ``squeeze(0)``): the caller gets
another rank than it passed. Kernels, regions and spellings other than the dev case (the vision RoPE wrapper);
adapters that restore the shape, and axes added to broadcast tables, stay quiet."""

from __future__ import annotations

from tests.rules.snippets import lint_snippet


def _lines(path: str, text: str) -> list[int]:
    return [d.line for d in lint_snippet(path, text, ["NPU314"]) if d.code == "NPU314"]


def test_layer_norm_adapter_returns_the_lifted_output() -> None:
    text = """
    import torch_npu


    def layer_norm_npu(hidden, weight, bias, eps):
        batched = hidden.unsqueeze(0)
        out = torch_npu.npu_layer_norm_eval(batched, weight.shape, weight, bias, eps)
        return out.contiguous()
    """
    assert _lines("veomni/ops/kernels/layer_norm/npu.py", text) == [7]


def test_swiglu_in_the_distributed_region_through_a_rebound_parameter() -> None:
    text = """
    from torch_npu import npu_swiglu


    def fused_act(x):
        x = x.float()
        x = x.unsqueeze(1)
        y = npu_swiglu(x, dim=-1)
        return y.to(x.dtype)
    """
    assert _lines("veomni/distributed/moe/fused_act.py", text) == [8]


def test_spec_replacement_returns_the_kernel_call_transposed_in_a_tuple() -> None:
    text = """
    import torch_npu


    def apply_rope_npu(query, key, cos, sin):
        query4, key4 = query.unsqueeze(0), key.unsqueeze(0)
        cos, sin = cos[None, :, None, :], sin[None, :, None, :]
        return (
            torch_npu.npu_rotary_mul(query4, cos, sin).transpose(1, 2),
            torch_npu.npu_rotary_mul(key4, cos, sin).transpose(1, 2),
        )
    """
    assert _lines("veomni/models/transformers/toy_vl/toy_vl_npu_patch_gen_config.py", text) == [7]


def test_restored_shapes_and_broadcast_tables_stay_quiet() -> None:
    text = """
    import torch
    import torch_npu


    def squeezed(q, cos, sin):
        q = q.unsqueeze(0)
        out = torch_npu.npu_rotary_mul(q, cos, sin)
        return out.squeeze(0)


    def indexed(q, cos, sin):
        out = torch_npu.npu_rotary_mul(q.unsqueeze(0), cos, sin)
        return out[0].transpose(0, 1)


    def viewed(q, cos, sin):
        out = torch_npu.npu_rotary_mul(q.unsqueeze(0), cos, sin)
        return out.view(q.shape)


    def tables_only(q, cos, sin):
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return torch_npu.npu_rotary_mul(q, cos, sin).transpose(1, 2)


    def local_lifted(q, cos, sin):
        ones = torch.ones(4).unsqueeze(0)
        return torch_npu.npu_rotary_mul(ones, cos, sin)
    """
    assert _lines("veomni/ops/kernels/rotary/npu.py", text) == []


def test_axis_added_by_a_none_index_in_a_checkpoint_helper() -> None:
    text = """
    import torch_npu


    def fused_swiglu_npu(x, dim=-1):
        batched = x[None, ...]
        return torch_npu.npu_swiglu(batched, dim=dim).contiguous()


    def fused_swiglu_npu_ok(x, dim=-1):
        batched = x[None, ...]
        return torch_npu.npu_swiglu(batched, dim=dim)[0]
    """
    assert _lines("veomni/checkpoint/npu_act.py", text) == [6]
