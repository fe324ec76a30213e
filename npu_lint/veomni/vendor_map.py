"""Vendor kernels and the registry ops that replace them (used by NPU301/NPU302 and ``npu-lint audit``).

Model code must reach vendor code (``torch_npu``, ``liger_kernel``, ``flash_attn``, ``triton``, ...) only
through a ``VeomniOp``; the kernel modules under ``veomni/ops/kernels`` are where vendor imports belong. This
table says, for a vendor name a model imports or calls, which registry op/variant covers it, so a finding can
name the replacement. Lookups use the longest dotted prefix: ``flash_attn`` covers every name in the package.

The ``torch_npu`` names in this table are checked against the ``torch-npu`` wheel's Python sources by
``tests/test_vendor_map.py`` (read statically: torch_npu cannot be imported without Ascend drivers).
"""

from __future__ import annotations

from dataclasses import dataclass

# families of GPU-only / vendor dependencies (the audit classifies by these)
NPU_VENDOR, GPU_KERNEL, GPU_ATTENTION, VEOMNI_KERNEL = (
    "npu-vendor",
    "gpu-kernel",
    "gpu-attention",
    "veomni-kernel",
)

# top-level packages that are vendor kernel libraries, and their family
VENDOR_PACKAGES: dict[str, str] = {
    "torch_npu": NPU_VENDOR,
    "mindspeed": NPU_VENDOR,  # MindSpeed (Ascend's Megatron acceleration library) and its fused ops
    "mindspeed_llm": NPU_VENDOR,
    "mindspeed_mm": NPU_VENDOR,
    "liger_kernel": GPU_KERNEL,
    "triton": GPU_KERNEL,
    "flash_attn": GPU_ATTENTION,
    "flash_attn_interface": GPU_ATTENTION,  # FlashAttention 3 (hopper) python interface
    "xformers": GPU_ATTENTION,
    "sageattention": GPU_ATTENTION,
    "flash_mla": GPU_ATTENTION,
    "fla": GPU_KERNEL,  # flash-linear-attention (triton)
    "causal_conv1d": GPU_KERNEL,
    "deep_gemm": GPU_KERNEL,
    "tilelang": GPU_KERNEL,
    "quack": GPU_KERNEL,
    "apex": GPU_KERNEL,
    "megablocks": GPU_KERNEL,  # MegaBlocks MoE (CUDA)
    "grouped_gemm": GPU_KERNEL,  # CUTLASS grouped GEMM (CUDA)
    "transformer_engine": GPU_KERNEL,  # NVIDIA Transformer Engine
    "cut_cross_entropy": GPU_KERNEL,  # Apple's cut cross-entropy (triton)
    "flashinfer": GPU_ATTENTION,
    "mamba_ssm": GPU_KERNEL,  # selective scan (CUDA / triton)
    "kernels": GPU_KERNEL,  # the Hugging Face kernels hub loader (get_kernel / LayerRepository)
}

# VeOmni's own kernel modules: model code reaches them through the registry, not by import
VEOMNI_KERNELS_PREFIX = "veomni.ops.kernels"

# names that live under veomni.ops.kernels but are dispatch helpers meant for model code (they take a VeomniOp
# or build one): importing them is not a vendor-kernel import
VEOMNI_KERNEL_HELPERS = frozenset(
    {"ForCausalLMLoss", "ForSequenceClassificationLoss", "attention_op", "linear_bias"}
)


@dataclass(frozen=True)
class VendorKernel:
    """A vendor name (a dotted prefix) and the registry op that replaces it in model code."""

    name: str  # dotted: "torch_npu.npu_rms_norm", "liger_kernel.transformers.rope", "flash_attn"
    op: str | None  # registry op, None when no registry op covers it
    variant: str | None = None
    note: str = ""

    @property
    def family(self) -> str:
        return family_of(self.name) or GPU_KERNEL

    def replacement(self) -> str:
        """``rms_norm/standard`` (or ``rms_norm``), or "" when no registry op covers the name."""
        if self.op is None:
            return ""
        return f"{self.op}/{self.variant}" if self.variant else self.op


_K = VendorKernel

TABLE: tuple[VendorKernel, ...] = (
    # -- torch_npu (Ascend) ---------------------------------------------------------------------------------
    _K("torch_npu.npu_rms_norm", "rms_norm", "standard", "returns (y, rstd); the op returns y"),
    _K("torch_npu.npu_add_rms_norm", "rms_norm", "standard", "fuses the residual add; the op does not"),
    _K(
        "torch_npu.npu_rotary_mul",
        "rope",
        "full",
        "rotary_mode picks the layout: 'half' is full, 'interleave' wan",
    ),
    _K("torch_npu.npu_apply_rotary_pos_emb", "rope", "full"),
    _K("torch_npu.npu_swiglu", "swiglu_mlp", "standard", "activation only; the op is the whole MLP"),
    _K("torch_npu.npu_geglu", "swiglu_mlp", "geglu", "activation only; the op is the whole MLP"),
    _K("torch_npu.npu_fusion_attention", "attention", "standard", "NPU rows: flash_attention_2"),
    _K("torch_npu.npu_fusion_attention_grad", "attention", "standard"),
    _K("torch_npu.npu_prompt_flash_attention", "attention", "standard", "inference kernel"),
    _K("torch_npu.npu_incre_flash_attention", "attention", "standard", "inference kernel"),
    _K("torch_npu.npu_fused_infer_attention_score", "attention", "standard", "inference kernel"),
    _K("torch_npu.npu_grouped_matmul", "moe_experts", "standard", "NPU row: fused_npu"),
    _K("torch_npu.npu_moe_init_routing", "moe_experts", "standard"),
    _K("torch_npu.npu_moe_token_permute", "moe_experts", "standard"),
    _K("torch_npu.npu_moe_token_unpermute", "moe_experts", "standard"),
    _K("torch_npu.npu_moe_gating_top_k_softmax", "moe_experts", "standard"),
    _K("torch_npu.npu_cross_entropy_loss", "cross_entropy_loss", "standard", "NPU uses chunk_loss"),
    _K("torch_npu", None, None, "the Ascend adapter; device helpers come from veomni.utils.device"),
    # -- MindSpeed (Ascend) -----------------------------------------------------------------------------------
    _K("mindspeed.ops.npu_rotary_position_embedding", "rope", "full"),
    _K("mindspeed.ops.gmm", "moe_experts", "standard", "grouped matmul (NPU row: fused_npu)"),
    _K("mindspeed.ops.grouped_matmul", "moe_experts", "standard", "grouped matmul (NPU row: fused_npu)"),
    _K("mindspeed", None, None, "MindSpeed (Ascend) kernels: register one as an op implementation"),
    _K("mindspeed_llm", None, None, "MindSpeed-LLM (Ascend) kernels: register one as an op implementation"),
    _K("mindspeed_mm", None, None, "MindSpeed-MM (Ascend) kernels: register one as an op implementation"),
    # -- liger_kernel -----------------------------------------------------------------------------------------
    _K("liger_kernel.transformers.rms_norm", "rms_norm", "standard"),
    _K("liger_kernel.ops.rms_norm", "rms_norm", "standard"),
    _K("liger_kernel.transformers.swiglu", "swiglu_mlp", "standard"),
    _K("liger_kernel.ops.swiglu", "swiglu_mlp", "standard", "activation only; the op is the whole MLP"),
    _K("liger_kernel.transformers.geglu", "swiglu_mlp", "geglu"),
    _K("liger_kernel.ops.geglu", "swiglu_mlp", "geglu", "activation only; the op is the whole MLP"),
    _K("liger_kernel.transformers.rope", "rope", "full"),
    _K("liger_kernel.ops.rope", "rope", "full"),
    _K("liger_kernel.transformers.fused_linear_cross_entropy", "cross_entropy_loss", "standard"),
    _K("liger_kernel.transformers.cross_entropy", "cross_entropy_loss", "standard"),
    _K("liger_kernel.ops.fused_linear_cross_entropy", "cross_entropy_loss", "standard"),
    _K("liger_kernel.ops.cross_entropy", "cross_entropy_loss", "standard"),
    _K("liger_kernel.transformers.functional.liger_cross_entropy", "cross_entropy_loss", "standard"),
    _K(
        "liger_kernel.transformers.functional.liger_fused_linear_cross_entropy",
        "cross_entropy_loss",
        "standard",
    ),
    _K("liger_kernel.transformers.functional.liger_rope", "rope", "full"),
    _K("liger_kernel.transformers.functional.liger_swiglu", "swiglu_mlp", "standard"),
    _K("liger_kernel.transformers.functional.liger_rms_norm", "rms_norm", "standard"),
    _K("liger_kernel", None, None, "GPU-only (triton) kernels"),
    # -- attention --------------------------------------------------------------------------------------------
    _K("flash_attn", "attention", "standard", "flash_attention_2 has an NPU row"),
    _K("flash_attn.cute", "attention", "standard", "FlashAttention 4 (flash_attention_4, GPU only)"),
    _K("flash_attn_interface", "attention", "standard", "FlashAttention 3 (flash_attention_3, GPU only)"),
    _K("xformers", "attention", "standard", "xformers memory-efficient attention (GPU only)"),
    _K("sageattention", "attention", "standard", "SageAttention (GPU only)"),
    _K("flash_mla", "attention", "standard", "FlashMLA (GPU only)"),
    # -- other GPU kernel libraries ---------------------------------------------------------------------------
    _K("triton", None, None, "a hand-written triton kernel: register it as an op implementation"),
    _K(
        "fla",
        None,
        None,
        "flash-linear-attention (GPU only)",
    ),
    _K("fla.ops.gated_delta_rule", "chunk_gated_delta_rule", "standard", "the `fla` row is GPU only"),
    _K("causal_conv1d", "causal_conv1d", "standard"),
    _K("deep_gemm", "moe_experts", "standard"),
    _K("quack", "moe_experts", "standard", "fused_quack (GPU only)"),
    _K("tilelang", None, None, "tilelang kernels (GPU only)"),
    _K("apex", None, None, "NVIDIA apex (GPU only)"),
    _K("megablocks", "moe_experts", "standard", "MegaBlocks MoE (CUDA only)"),
    _K("grouped_gemm", "moe_experts", "standard", "CUTLASS grouped GEMM (CUDA only)"),
    _K("transformer_engine", None, None, "NVIDIA Transformer Engine (GPU only)"),
    _K("cut_cross_entropy", "cross_entropy_loss", "standard", "cut cross-entropy (triton, GPU only)"),
    _K("flashinfer", "attention", "standard", "FlashInfer (GPU only)"),
    _K("mamba_ssm", None, None, "mamba selective-scan kernels (CUDA / triton)"),
    _K(
        "kernels",
        None,
        None,
        "the Hugging Face kernels hub: it downloads a prebuilt kernel for the current device, outside the registry",
    ),
    # -- VeOmni's own kernel modules --------------------------------------------------------------------------
    _K("veomni.ops.kernels.rms_norm", "rms_norm", "standard"),
    _K("veomni.ops.kernels.rotary", "rope", "full"),
    _K("veomni.ops.kernels.swiglu", "swiglu_mlp", "standard"),
    _K("veomni.ops.kernels.cross_entropy", "cross_entropy_loss", "standard"),
    _K("veomni.ops.kernels.load_balancing_loss", "load_balancing_loss", "standard"),
    _K("veomni.ops.kernels.moe", "moe_experts", "standard"),
    _K("veomni.ops.kernels.attention", "attention", "standard"),
    _K("veomni.ops.kernels.gated_delta_rule", "chunk_gated_delta_rule", "standard"),
    _K("veomni.ops.kernels.gated_delta_rule.npu_causal_conv1d", "causal_conv1d", "standard"),
    _K("veomni.ops.kernels.gated_delta_rule.npu_rms_norm_gated", "rms_norm_gated", "standard"),
    _K("veomni.ops.kernels.deepseek_sparse_attention", "dsa_attention", None, "DeepSeek sparse attention"),
    _K(
        "veomni.ops.kernels.deepseek_sparse_attention.flashmla_cudnn.indexer_select_topk", "dsa_indexer", None
    ),
    _K("veomni.ops.kernels.mhc", "mhc", None),
    _K(
        "veomni.ops.kernels.deepseek_v4", None, None, "DeepSeek-V4 kernels with no registry op in the catalog"
    ),
    _K("veomni.ops.kernels", None, None, "a VeOmni kernel module"),
)

_BY_NAME: dict[str, VendorKernel] = {k.name: k for k in TABLE}


def family_of(dotted: str) -> str | None:
    """The vendor family of a dotted module/name, or None when it is not vendor kernel code."""
    if is_veomni_kernel(dotted):
        return VEOMNI_KERNEL
    return VENDOR_PACKAGES.get(dotted.split(".", 1)[0])


def is_veomni_kernel(dotted: str) -> bool:
    if not (dotted == VEOMNI_KERNELS_PREFIX or dotted.startswith(VEOMNI_KERNELS_PREFIX + ".")):
        return False
    return dotted.rsplit(".", 1)[-1] not in VEOMNI_KERNEL_HELPERS


def is_vendor(dotted: str) -> bool:
    """Whether a dotted module or name is vendor kernel code (``torch_npu.npu_rms_norm``, ``flash_attn``...)."""
    return family_of(dotted) is not None


def lookup(dotted: str) -> VendorKernel | None:
    """The table entry for the longest dotted prefix of ``dotted`` (None if not vendor code)."""
    if not is_vendor(dotted):
        return None
    parts = dotted.split(".")
    if len(parts) > 1 and parts[-1].startswith(HELPER_PREFIXES):
        return VendorKernel(dotted, None, None, HELPER_NOTE)
    for n in range(len(parts), 0, -1):
        entry = _BY_NAME.get(".".join(parts[:n]))
        if entry is not None:
            if entry.op is None and n < len(parts):
                return _by_kernel_word(dotted) or entry
            return entry
    return _by_kernel_word(dotted) or VendorKernel(parts[0], None, None)


# names of kernel-module functions that are not kernels (compatibility predicates, metadata builders)
HELPER_PREFIXES = ("check_", "is_", "has_", "get_", "supports_", "precompute_", "prepare_")
HELPER_NOTE = "a host-side helper of the kernel module (metadata or a capability check), not a kernel"

# keywords of torch_npu kernels whose absence chooses another mode rather than dropping an input: an attention
# call without a mask is bidirectional, without ``pse`` has no positional bias, without ``actual_seq_qlen`` is
# not packed (used by NPU311, which compares a call's keywords with its siblings')
NPU_MODE_KEYWORDS = frozenset(
    {
        "atten_mask",
        "attn_mask",
        "pse",
        "padding_mask",
        "drop_mask",
        "prefix",
        "actual_seq_qlen",
        "actual_seq_kvlen",
        "actual_seq_lengths",
        "actual_seq_lengths_kv",
        "real_shift",
        "bias",
    }
)

# transformers' names of GPU attention kernels (``_attn_implementation`` values); VeOmni runs them under its own
# names (``veomni_<name>_with_sp``, the replacement table of the tree's ops arguments), an Ascend run under those
# or ``sdpa`` (used by NPU229)
TRANSFORMERS_ATTENTION_KERNELS = ("flash_attention", "flex_attention", "magi_attention")
VEOMNI_ATTENTION_PREFIX = "veomni_"


def is_transformers_attention_kernel(name: str | None) -> bool:
    """``flash_attention_2``, ``flex_attention``...: a transformers GPU attention kernel name."""
    return name is not None and name.startswith(TRANSFORMERS_ATTENTION_KERNELS)


def is_veomni_attention_name(name: str | None) -> bool:
    """``veomni_flash_attention_2_with_sp``...: a name VeOmni registers its own attention under."""
    return name is not None and name.startswith(VEOMNI_ATTENTION_PREFIX)


def veomni_attention_name(name: str) -> str:
    """The name VeOmni runs a transformers attention kernel under (``flash_attention_2`` ->
    ``veomni_flash_attention_2_with_sp``)."""
    return f"{VEOMNI_ATTENTION_PREFIX}{name}_with_sp"


# words in a vendor kernel's own name and the registry op it implements (checked in order: the gated norm
# before the plain one), for names under a package whose table entry names no op (``liger_kernel``, ``fla``)
_KERNEL_WORDS: tuple[tuple[str, str, str], ...] = (
    ("rmsnormgated", "rms_norm_gated", "standard"),
    ("normgate", "rms_norm_gated", "standard"),
    ("crossentropy", "cross_entropy_loss", "standard"),
    ("rmsnorm", "rms_norm", "standard"),
    ("swiglu", "swiglu_mlp", "standard"),
    ("geglu", "swiglu_mlp", "geglu"),
    ("rotary", "rope", "full"),
    ("rope", "rope", "full"),
    ("shortconvolution", "causal_conv1d", "standard"),
    ("causalconv1d", "causal_conv1d", "standard"),
    ("gateddeltarule", "chunk_gated_delta_rule", "standard"),
)


def _by_kernel_word(dotted: str) -> VendorKernel | None:
    """The op a vendor name implements, from the words of its last component (``LigerFusedLinearCrossEntropyLoss``
    -> cross_entropy_loss, ``FusedRMSNormGated`` -> rms_norm_gated)."""
    last = dotted.rsplit(".", 1)[-1].replace("_", "").lower()
    for word, op, variant in _KERNEL_WORDS:
        if word in last:
            return VendorKernel(dotted, op, variant)
    return None


def torch_npu_names() -> list[str]:
    """The ``torch_npu.<name>`` kernel names the table relies on (checked against the wheel by a test)."""
    return sorted(k.name.split(".", 1)[1] for k in TABLE if k.name.startswith("torch_npu."))


# -- call contracts of the Ascend kernels the trees call (torch_npu's documented signatures) ---------------------
# kernels that return a tuple whose first element is the output (``npu_rms_norm`` -> (y, rstd))
NPU_TUPLE_RESULTS: frozenset[str] = frozenset({"npu_rms_norm", "npu_fusion_attention", "npu_grouped_matmul"})
# of those, kernels returning a list of tensors (one per group or split): a plain wrapper may return it whole
NPU_LIST_RESULTS: frozenset[str] = frozenset({"npu_grouped_matmul"})
# positional roles: kernel -> (index, role); a role is matched against the argument's spelling
NPU_POSITIONAL_ROLES: dict[str, tuple[tuple[int, str], ...]] = {
    "npu_rms_norm": ((1, "weight"), (2, "eps")),
    "npu_rotary_mul": ((1, "cos"), (2, "sin")),
    "npu_fusion_attention": ((3, "head_num"), (4, "input_layout")),
}
# keyword roles: kernel -> keyword -> role
NPU_KEYWORD_ROLES: dict[str, dict[str, str]] = {
    "npu_rms_norm": {"epsilon": "eps", "gamma": "weight"},
    "npu_rotary_mul": {"r1": "cos", "r2": "sin"},
}
# spellings of each role (a whole-word part of the argument's last name); a role's opposite spelling marks a swap
NPU_ROLE_WORDS: dict[str, tuple[str, ...]] = {
    "weight": ("weight", "gamma"),
    "eps": ("eps", "epsilon", "variance_epsilon"),
    "cos": ("cos",),
    "sin": ("sin",),
}
NPU_ROTARY_MODES: frozenset[str] = frozenset({"half", "interleave"})
# npu_fusion_attention layouts and the axis of the head count in each
NPU_FA_LAYOUT_HEAD_AXIS: dict[str, int | None] = {"BSND": 2, "BNSD": 1, "TND": 1, "BSH": None, "SBH": None}
NPU_FA_SPARSE_MODES: frozenset[int] = frozenset(range(9))
# literal options that describe a data argument the kernel shares with its twin calls (the q and k rotations of
# one function share cos/sin; a grouped matmul's forward and backward share the group list): kernel -> option ->
# (position or -1 when keyword-only, default, the arguments it describes as (position, keyword)); used by NPU315
NPU_TWIN_OPTIONS: dict[str, dict[str, tuple[int, object, tuple[tuple[int, str], ...]]]] = {
    "npu_rotary_mul": {"rotary_mode": (3, "half", ((1, "r1"), (2, "r2")))},
    "npu_grouped_matmul": {"group_list_type": (-1, 0, ((-1, "group_list"),))},
}
# kernels with several outputs whose later elements are auxiliary statistics, not the result (NPU309): kernel ->
# index -> what it holds
NPU_AUX_OUTPUTS: dict[str, dict[int, str]] = {
    "npu_rms_norm": {1: "the reciprocal RMS (one value per row)"},
    "npu_add_rms_norm": {1: "the reciprocal RMS (one value per row)"},
    "npu_fusion_attention": {1: "the softmax row maxima", 2: "the softmax row sums"},
    "npu_moe_token_permute": {1: "the index map for the unpermute"},
}
# words naming an auxiliary statistic (a tuple target so named holds one) and words naming a result
NPU_AUX_WORDS: tuple[str, ...] = ("rstd", "invvar", "inv_rms", "rsigma", "softmax_max", "softmax_sum")
NPU_RESULT_WORDS: tuple[str, ...] = ("out", "output", "hidden", "hidden_states", "y", "normed", "result")
# words a GPU-only implementation name or a registry's GPU default is spelt with (``liger``, ``triton``,
# ``REGISTRY.default``): a file holding none of them selects no GPU implementation (NPU225's pre-check)
GPU_IMPLEMENTATION_WORDS: tuple[str, ...] = (
    "liger",
    "triton",
    "quack",
    "tilelang",
    "cudnn",
    "cutlass",
    "flashmla",
    "fla",
    ".default",
)
# words that name a backend in a kernel entry function's name (``npu_fused_moe_forward``,
# ``group_gemm_fused_moe_forward``, ``load_balancing_loss_triton``): two entries whose names differ only by such
# words implement one op (NPU316)
BACKEND_NAME_WORDS: frozenset[str] = frozenset(
    {
        "npu",
        "ascend",
        "ascendc",
        "eager",
        "pytorch",
        "torch",
        "native",
        "triton",
        "liger",
        "kernel",
        "fused",
        "quack",
        "group",
        "gemm",
        "cuda",
        "tilelang",
        "cudnn",
        "flash",
    }
)
