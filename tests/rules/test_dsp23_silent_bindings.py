"""Silent bindings of a kernel choice (NPU228, widened) and device switches with a host left out (NPU502's partial
switch): shapes in several regions with other names, and the correct variants that must stay quiet."""

from __future__ import annotations

import ast
import textwrap

import pytest

from npu_lint.veomni import registration
from tests.rules.snippets import lint_snippet

# -- NPU228: a config field read by a computed name, with a default -----------------------------------------------
_GETATTR_BAD = [
    (
        "veomni/ops/dispatch.py",
        """
        class OpsConfigSlot:
            def __init__(self, field_name, default):
                self.field_name = field_name
                self._value = default

            def bind(self, ops_config):
                self._value = getattr(ops_config, self.field_name, self._value)
        """,
    ),
    (
        "veomni/trainer/kernel_binding.py",
        """
        def bind_kernels(model, ops_cfg, fields):
            for field, fallback_kernel in fields.items():
                setattr(model, field, getattr(ops_cfg, field, fallback_kernel))
        """,
    ),
    (
        "veomni/models_kernel/utils/op_utils.py",
        """
        def resolve_impl(name, default_impl="liger_kernel"):
            config = get_ops_config()
            return getattr(config, f"{name}_implementation", default_impl)
        """,
    ),
]


@pytest.mark.parametrize("path,text", _GETATTR_BAD)
def test_npu228_config_field_default_fires(path: str, text: str) -> None:
    assert len(lint_snippet(path, text, ["NPU228"])) == 1


@pytest.mark.parametrize(
    "path,text",
    [
        # a literal field: a reader of one known field
        (
            "veomni/ops/config.py",
            'def impl(ops_config):\n    return getattr(ops_config, "rms_norm_implementation", "eager")\n',
        ),
        # no default: a missing field raises
        (
            "veomni/ops/dispatch.py",
            "def bind(self, ops_config):\n    self._value = getattr(ops_config, self.field_name)\n",
        ),
        # a None default, then tested
        (
            "veomni/ops/dispatch.py",
            "def bind(self, ops_config):\n    value = getattr(ops_config, self.field_name, None)\n"
            "    if value is None:\n        raise AttributeError(self.field_name)\n    self._value = value\n",
        ),
        # not a config object
        (
            "veomni/data/collator.py",
            "def pick(batch, key, default_kernel):\n    return getattr(batch, key, default_kernel)\n",
        ),
    ],
)
def test_npu228_config_field_default_quiet(path: str, text: str) -> None:
    assert lint_snippet(path, text, ["NPU228"]) == []


# -- NPU228: a chain over implementation names whose else binds None ------------------------------------------------
_CHAIN_BAD = [
    (
        "veomni/ops/kernels/moe/__init__.py",
        """
        def apply_fused_moe_patch(fused_moe_kernel="triton"):
            global _fused_moe_forward
            if fused_moe_kernel == "npu":
                from .npu_group_gemm import npu_fused_moe_forward

                _fused_moe_forward = npu_fused_moe_forward
            elif fused_moe_kernel == "triton" and is_fused_moe_available():
                from .group_gemm import group_gemm_fused_moe_forward

                _fused_moe_forward = group_gemm_fused_moe_forward
            else:
                _fused_moe_forward = None
        """,
    ),
    (
        "veomni/models/seed_omni/encoder/vit/attention.py",
        """
        class VitAttention:
            def bind(self, attn_backend):
                if attn_backend == "flash":
                    self.kernel = flash_varlen
                elif attn_backend == "npu_fusion":
                    self.kernel = npu_fusion_attention
                elif attn_backend == "sdpa":
                    self.kernel = sdpa_attention
                else:
                    self.kernel = None
        """,
    ),
    (
        "veomni/ops/kernels/rotary/select.py",
        """
        def select_rotary(impl):
            if impl in ("npu",):
                fn = npu_rotary_mul
            elif impl == "triton":
                fn = triton_rotary
            else:
                fn = None
            return fn
        """,
    ),
]


@pytest.mark.parametrize(
    "text",
    [
        # the else raises
        """
        def select(impl):
            if impl == "npu":
                fn = npu_kernel
            elif impl == "triton":
                fn = triton_kernel
            else:
                raise ValueError(impl)
            return fn
        """,
        # the else is the eager path, named as such ("eager" is a choice): NPU228's eager checks judge it
        """
        def select(impl):
            if impl == "npu":
                fn = npu_kernel
            elif impl == "triton":
                fn = triton_kernel
            else:
                fn = eager_kernel
            return fn
        """,
        # one test only: an optional feature, not a chain of implementations
        """
        def select(impl):
            if impl == "npu":
                fn = npu_kernel
            else:
                fn = None
            return fn
        """,
    ],
)
def test_npu228_name_chain_quiet(text: str) -> None:
    assert lint_snippet("veomni/ops/kernels/x/select.py", text, ["NPU228"]) == []


# -- NPU502: device tests with no else -----------------------------------------------------------------------------
def _partial(text: str) -> list[int]:
    return [s.lineno for s, _ in registration.find_partial_switches(ast.parse(textwrap.dedent(text)))]


@pytest.mark.parametrize(
    "text",
    [
        """
        def register_glm4_modeling(architecture):
            if IS_CUDA_AVAILABLE:
                from .generated.patched_modeling_glm4_gpu import Glm4ForCausalLM
            elif IS_NPU_AVAILABLE:
                from .generated.patched_modeling_glm4_npu import Glm4ForCausalLM
            return Glm4ForCausalLM
        """,
        """
        def load_wan(architecture):
            if is_torch_npu_available():
                from .generated.patched_modeling_wan_npu import WanModel
            elif torch.cuda.is_available():
                from .generated.patched_modeling_wan_gpu import WanModel
            return WanModel
        """,
        """
        _ON_NPU = IS_NPU_AVAILABLE

        def build_vit():
            if _ON_NPU:
                from .generated import patched_modeling_vit_npu as mod
            elif get_device_type() == "cuda":
                from .generated import patched_modeling_vit_gpu as mod
            return mod.VitModel
        """,
    ],
)
def test_npu502_partial_switch_fires(text: str) -> None:
    assert len(_partial(text)) == 1


@pytest.mark.parametrize(
    "text",
    [
        """
        def register_glm4_modeling(architecture):
            if IS_NPU_AVAILABLE:
                from .generated.patched_modeling_glm4_npu import Glm4ForCausalLM
            else:
                from .generated.patched_modeling_glm4_gpu import Glm4ForCausalLM
            return Glm4ForCausalLM
        """,
        # the chain ends in an else that raises: a host with neither is told
        """
        def register_glm4_modeling(architecture):
            if IS_NPU_AVAILABLE:
                from .generated.patched_modeling_glm4_npu import Glm4ForCausalLM
            elif IS_CUDA_AVAILABLE:
                from .generated.patched_modeling_glm4_gpu import Glm4ForCausalLM
            else:
                raise RuntimeError("no accelerator")
            return Glm4ForCausalLM
        """,
        # a switch on a setting, not the device
        """
        def register_glm4_modeling(architecture):
            if "Causal" in architecture:
                from .generated.patched_modeling_glm4_gpu import Glm4ForCausalLM
            return Glm4ForCausalLM
        """,
        # a device test that imports no generated module (a kernel patch)
        """
        def register_glm4_modeling(architecture):
            if IS_NPU_AVAILABLE:
                from veomni.ops.kernels.npu import apply_npu_patch
                apply_npu_patch()
            from .generated.patched_modeling_glm4_gpu import Glm4ForCausalLM
            return Glm4ForCausalLM
        """,
    ],
)
def test_npu502_partial_switch_quiet(text: str) -> None:
    assert _partial(text) == []


# -- NPU228: a requested implementation narrowed by call conditions, dropped without notice ------------------------
_NARROWED_BAD = [
    (
        "veomni/models/transformers/deepseek_v3/deepseek_v3_gpu_patch_gen_config.py",
        """
        def mla_attention_forward(self, query, key, value, attn_impl):
            use_flashmla = attn_impl == "flashmla" and query.is_cuda and query.shape[-1] == 576
            if use_flashmla:
                return flash_mla_with_kvcache(query, key, value)
            return eager_mla(query, key, value)
        """,
    ),
    (
        "veomni/ops/kernels/rotary/__init__.py",
        """
        def apply_rotary(q, k, cos, sin, rope_backend="triton"):
            fused = rope_backend == "npu" and q.device.type == "npu" and q.dim() == 4
            if fused:
                return npu_rotary_mul(q, cos, sin), npu_rotary_mul(k, cos, sin)
            else:
                return rotate_eager(q, k, cos, sin)
        """,
    ),
    (
        "veomni/models/diffusers/wan/attention.py",
        """
        class WanAttention:
            def forward(self, x, mask):
                fast = self.kernel_impl == "sparse_video" and mask is None and x.shape[1] % 128 == 0
                if fast:
                    return sparse_video_attention(x)
                return sdpa(x, mask)
        """,
    ),
]


@pytest.mark.parametrize(
    "path,text,fragment",
    [(p, t, "unbound") for p, t in _CHAIN_BAD] + [(p, t, "without notice") for p, t in _NARROWED_BAD],
)
def test_npu228_silent_binding_fires(path: str, text: str, fragment: str) -> None:
    """A name chain left unbound, or a requested kernel narrowed away without notice: one finding saying which."""
    found = lint_snippet(path, text, ["NPU228"])
    assert len(found) == 1 and fragment in found[0].message


@pytest.mark.parametrize(
    "text",
    [
        # the requested-but-unusable case raises
        """
        def forward(query, attention_implementation):
            use_tilelang = attention_implementation == "tilelang" and query.is_cuda
            if attention_implementation == "tilelang" and not use_tilelang:
                raise ValueError("tilelang requested but unusable")
            if use_tilelang:
                return tilelang_attention(query)
            return eager_attention(query)
        """,
        # ... or warns
        """
        def forward(query, attention_implementation):
            use_tilelang = attention_implementation == "tilelang" and query.is_cuda
            if not use_tilelang and attention_implementation == "tilelang":
                logger.warning_once("tilelang unusable here, running eager")
            if use_tilelang:
                return tilelang_attention(query)
            return eager_attention(query)
        """,
        # the flag is the request alone
        """
        def forward(query, attention_implementation):
            use_tilelang = attention_implementation == "tilelang"
            if use_tilelang:
                return tilelang_attention(query)
            return eager_attention(query)
        """,
        # a condition on something other than an implementation name
        """
        def forward(query, mode):
            causal = mode == "causal" and query.shape[1] > 1
            if causal:
                return masked(query)
            return plain(query)
        """,
    ],
)
def test_npu228_narrowed_request_quiet(text: str) -> None:
    assert lint_snippet("veomni/models/transformers/x/x_gpu_patch_gen_config.py", text, ["NPU228"]) == []
