"""Kernel registration for the demo's MoE experts: the generic SwiGLU experts and toy_moe's own variant, and a
family of attention-like rows registered in a loop."""

from veomni.ops import register_op


def _standard_experts(hidden_states, gate_up, down):
    return hidden_states


def _toy_moe_experts(hidden_states, gate_up, down):
    return hidden_states


def lookup(name):
    return _standard_experts


register_op("moe_experts", "standard", "eager", wrapper=_standard_experts, description="SwiGLU experts")
register_op("moe_experts", "toy_moe", "eager", wrapper=_toy_moe_experts, description="toy_moe's biased experts")

for _impl in ("eager", "sdpa"):
    # NPU230: every row's wrapper reads `_impl` when called, so all of them run the last one
    register_op("toy_mixer_attention", "standard", _impl, wrapper=lambda *a, **k: lookup(_impl)(*a, **k))
