"""Issue 20 (round 22's rmsnorm miss): NPU406 holds a spec's RMSNorm replacement to the fp32 numerics its patch's
description promises (DeepSeek V4's official FP32 fallback), where upstream itself applies the weight after the
cast back."""

from __future__ import annotations

from tests.rules.snippets import lint_snippet

SPEC = "veomni/models/transformers/deepseek_v4/deepseek_v4_gpu_patch_gen_config.py"

TEMPLATE = """
import torch
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(
    source_module="transformers.models.deepseek_v4.modeling_deepseek_v4",
    target_file="patched_modeling_deepseek_v4_gpu.py",
)


@config.override_method("DeepseekV4RMSNorm.forward", description={description!r})
def deepseek_v4_rms_norm_forward_patched(self, hidden_states):
    if veomni_rms_norm.use_non_eager_impl:
        return veomni_rms_norm(hidden_states, self.weight, self.variance_epsilon)
    input_dtype = hidden_states.dtype
    hidden_states = hidden_states.float()
    variance = hidden_states.square().mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
    return {result}
"""

PROMISE = "Kernel guard with the reference eager fp32 fallback"
INPUT_ORDER = "self.weight * hidden_states.to(input_dtype)"
FP32_ORDER = "(self.weight.float() * hidden_states).to(input_dtype)"


def lint(description: str, result: str) -> list:
    return lint_snippet(SPEC, TEMPLATE.format(description=description, result=result), ["NPU406"])


def test_weight_applied_after_the_cast_back_against_an_fp32_promise() -> None:
    diags = lint(PROMISE, INPUT_ORDER)
    assert [d.line for d in diags] == [18]
    assert "its patch promises fp32 numerics" in diags[0].message


def test_weight_applied_in_fp32_as_promised_is_quiet() -> None:
    assert not lint(PROMISE, FP32_ORDER)


def test_upstream_order_without_a_promise_is_quiet() -> None:
    # upstream (transformers) applies DeepSeek V4's weight after the cast back: a patch that says nothing of fp32
    # keeps upstream's numerics
    assert not lint("Kernel guard with the eager fallback", INPUT_ORDER)
