"""Kernel registration for RoPE (not model code: vendor imports are allowed here, lazily)."""

from veomni.ops import register_op


def _eager_rope(q, k, cos, sin):
    return q * cos, k * cos


def _npu_rope(q, k, cos, sin):
    import torch_npu

    return torch_npu.npu_rotary_mul(q, cos, sin), torch_npu.npu_rotary_mul(k, cos, sin)


register_op("rope", "full", "eager", wrapper=_eager_rope, description="reference RoPE")
register_op("rope", "full", "npu", wrapper=_npu_rope, description="Ascend fused RoPE")
# NPU209: partial RoPE has only its eager row, although full RoPE has an NPU row and the Llama NPU spec selects
# `rope/partial` (llama_npu_patch_gen_config.py)
register_op("rope", "partial", "eager", wrapper=_eager_rope, description="reference partial RoPE")
