"""NPU238 op-slot-bypassed: an operator dispatched through a slot or handle, reached directly through its
kernel's module-level name in the same file. Shapes in several regions (generated files, specs with their
post-import blocks, the VeomniOp tree, seed_omni and diffusers models, ops modules), with other names, and the
correct variants that must stay quiet."""

from __future__ import annotations

import pytest

from npu_lint.rules.dispatch.npu238_op_slot_bypassed import op_key
from tests.rules.snippets import lint_snippet

_BAD = [
    (
        "veomni/models/transformers/mamba2/generated/patched_modeling_mamba2_npu.py",
        """
        from veomni.ops.dispatch import OpSlot

        selective_scan_fn = None
        veomni_selective_scan = OpSlot("selective_scan", "standard")


        class Mamba2Mixer(nn.Module):
            def __init__(self, config):
                super().__init__()
                self.scan = selective_scan_fn if selective_scan_fn is not None else torch_selective_scan
        """,
        "selective_scan_fn",
    ),
    (
        "veomni/models/transformers/glm_linear/glm_linear_npu_patch_gen_config.py",
        '''
        from veomni.patchgen.patch_spec import PatchConfig

        config = PatchConfig(source_module="transformers.models.glm.modeling_glm", target_file="x_npu.py")
        config.add_post_import_block(
            """
            from veomni.ops.dispatch import OpSlot
            veomni_lightning_attention = OpSlot("lightning_attention", "standard")
            """
        )
        lightning_attention = None


        @config.override_method("GlmLinearAttention.forward")
        def glm_linear_attention_forward(self, hidden_states):
            return lightning_attention(hidden_states, self.decay)
        ''',
        "lightning_attention",
    ),
    (
        "veomni/models_kernel/transformers/seed_oss/modeling_seed_oss.py",
        """
        from veomni.ops.kernels.rms_norm import npu_rms_norm
        from veomni.ops.op_registry import VeomniOp


        class SeedOssRMSNorm(nn.Module):
            def __init__(self, hidden_size, eps, impl):
                super().__init__()
                self.veomni_rms_norm = VeomniOp("rms_norm", "standard", impl)

            def forward(self, hidden_states):
                return npu_rms_norm(hidden_states, self.weight, self.eps)
        """,
        "npu_rms_norm",
    ),
    (
        "veomni/models/diffusers/wan/modeling_wan.py",
        """
        from liger_kernel.transformers.rms_norm import LigerRMSNorm
        from veomni.ops.dispatch import OpSlot

        veomni_rms_norm = OpSlot("rms_norm", "standard")


        def build_norm(dim, eps):
            return LigerRMSNorm(dim, eps=eps)
        """,
        "LigerRMSNorm",
    ),
    (
        "veomni/models/seed_omni/decoder/moe_head/modeling.py",
        """
        from veomni.ops.kernels.moe.group_gemm import fused_moe_forward
        from veomni.ops.dispatch import OpSlot

        veomni_fused_moe = OpSlot("fused_moe", "standard")


        class MoeHead(nn.Module):
            def forward(self, x, weights):
                return fused_moe_forward(x, weights)
        """,
        "fused_moe_forward",
    ),
]


@pytest.mark.parametrize("path,text,name", _BAD, ids=[b[2] for b in _BAD])
def test_fires(path: str, text: str, name: str) -> None:
    found = lint_snippet(path, text, ["NPU238"])
    assert [d.source_line.strip() for d in found] and all(name in d.message for d in found), found
    assert len(found) == 1


_GOOD = [
    # the slot is read: bound_kernel() with the torch fallback, use_non_eager_impl guards
    (
        "veomni/models/transformers/mamba2/generated/patched_modeling_mamba2_npu.py",
        """
        from veomni.ops.dispatch import OpSlot

        selective_scan_fn = None
        torch_selective_scan = None
        veomni_selective_scan = OpSlot("selective_scan", "standard")
        is_fast_path_available = all((selective_scan_fn,))


        class Mamba2Mixer(nn.Module):
            def __init__(self, config):
                super().__init__()
                self.scan = veomni_selective_scan.bound_kernel() or torch_selective_scan
        """,
    ),
    # the name is the function's own parameter or local
    (
        "veomni/models/transformers/qwen3_next/generated/patched_modeling_qwen3_next_gpu.py",
        """
        from veomni.ops.dispatch import OpSlot

        veomni_causal_conv1d = OpSlot("causal_conv1d", "standard")


        def conv_forward(x, causal_conv1d_fn=None):
            if causal_conv1d_fn is None:
                causal_conv1d_fn = veomni_causal_conv1d.bound_kernel()
            return causal_conv1d_fn(x)


        def other(x):
            chunk = veomni_causal_conv1d.bound_kernel()
            causal_conv1d = chunk
            return causal_conv1d(x)
        """,
    ),
    # another operator's kernel (the decode-only update of the same family)
    (
        "veomni/models/transformers/qwen3_5/generated/patched_modeling_qwen3_5_npu.py",
        """
        from veomni.ops.dispatch import OpSlot

        causal_conv1d_update = None
        torch_causal_conv1d_update = None
        veomni_causal_conv1d = OpSlot("causal_conv1d", "standard")


        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.causal_conv1d_update = causal_conv1d_update or torch_causal_conv1d_update
        """,
    ),
    # no slot for the operator in this file: the direct kernel is the file's own choice (other rules judge it)
    (
        "veomni/models/transformers/qwen3_next/modeling_qwen3_next.py",
        """
        from fla.modules import FusedRMSNormGated


        class Net(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.norm = FusedRMSNormGated(dim)
        """,
    ),
    # the kernel module that implements the op (no slot there)
    (
        "veomni/ops/kernels/rms_norm/npu.py",
        """
        import torch_npu


        def npu_rms_norm(x, w, eps):
            return torch_npu.npu_rms_norm(x, w, eps)[0]


        def rms_norm_forward(module, x):
            return npu_rms_norm(x, module.weight, module.eps)
        """,
    ),
]


@pytest.mark.parametrize("path,text", _GOOD)
def test_quiet(path: str, text: str) -> None:
    assert lint_snippet(path, text, ["NPU238"]) == []


def test_op_key() -> None:
    assert op_key("FusedRMSNormGated") == op_key("rms_norm_gated")
    assert op_key("causal_conv1d_fn") == op_key("causal_conv1d")
    assert op_key("LigerRMSNorm") == op_key("rms_norm") == op_key("npu_rms_norm")
    assert op_key("causal_conv1d_update") != op_key("causal_conv1d")
    assert op_key("torch_chunk_gated_delta_rule") != op_key("chunk_gated_delta_rule")


@pytest.mark.parametrize(
    "path,text",
    [
        # the eager reference in the else of the slot's guard
        (
            "veomni/models/transformers/toy_moe/toy_moe_gpu_patch_gen_config.py",
            """
            from transformers.models.toy_moe.modeling_toy_moe import load_balancing_loss_func
            from veomni.ops.dispatch import OpSlot

            veomni_load_balancing_loss = OpSlot("load_balancing_loss", "standard")


            def forward(self, router_logits):
                if veomni_load_balancing_loss.use_non_eager_impl:
                    aux_loss = veomni_load_balancing_loss(router_logits, self.num_experts)
                else:
                    aux_loss = load_balancing_loss_func(router_logits, self.num_experts)
                return aux_loss
            """,
        ),
        # a wrapper handed the handle
        (
            "veomni/models_kernel/transformers/toy_moe/toy_moe_gpu_patch_gen_config.py",
            """
            from functools import partial

            from veomni.models_kernel.loss_utils import load_balancing_loss
            from veomni.ops import VeomniOp


            def init(self, config):
                self.veomni_lb = VeomniOp("load_balancing_loss", "standard", "eager")
                self.load_balancing_loss = partial(load_balancing_loss, op=self.veomni_lb)
            """,
        ),
    ],
)
def test_quiet_beside_the_slot(path: str, text: str) -> None:
    assert lint_snippet(path, text, ["NPU238"]) == []


def test_fires_outside_the_guard_of_the_slot() -> None:
    text = """
    from veomni.ops.dispatch import OpSlot

    causal_conv1d_fn = None
    veomni_causal_conv1d = OpSlot("causal_conv1d", "standard")


    def forward(self, x):
        if veomni_causal_conv1d.use_non_eager_impl:
            y = veomni_causal_conv1d(x)
        for _ in range(2):
            x = causal_conv1d_fn(x)
        return x
    """
    found = lint_snippet("veomni/models/transformers/x/generated/patched_modeling_x_npu.py", text, ["NPU238"])
    assert len(found) == 1
