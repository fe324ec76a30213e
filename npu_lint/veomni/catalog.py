"""The built-in operator catalog: VeOmni's registry rows (VeomniOp generation), as the contract states them.

Used when no VeOmni tree is present (out-of-tree models); the project index (npu_lint.veomni.project) reads the
real rows of a tree statically and falls back to this table. The catalog names the offset (Gemma-style)
RMSNorm ``offset``; trees name it as they register it (``qwen3_5`` in VeOmni's), which the tree's
ApiProfile (npu_lint.veomni.profile) records: :func:`catalog_rows` and :func:`slot_target` take that name.
"""

from __future__ import annotations

from dataclasses import dataclass

ANY, NPU, GPU, MLU = "any", "npu", "gpu", "mlu"


@dataclass(frozen=True, order=True)
class OpRow:
    op: str
    variant: str
    impl: str
    requirement: str = ANY  # any | npu | gpu | mlu

    @property
    def triple(self) -> tuple[str, str, str]:
        return (self.op, self.variant, self.impl)


def _rows(op: str, variants: tuple[str, ...], impls: dict[str, str]) -> list[OpRow]:
    return [OpRow(op, v, impl, req) for v in variants for impl, req in impls.items()]


BUILTIN_ROWS: tuple[OpRow, ...] = tuple(
    sorted(
        [
            *_rows("rms_norm", ("standard",), {"eager": ANY, "liger_kernel": GPU, "triton": GPU, "npu": NPU}),
            *_rows("rms_norm", ("offset",), {"eager": ANY, "liger_kernel": GPU, "npu": NPU}),
            *_rows("rms_norm", ("unweighted", "deepseek_v4"), {"eager": ANY, "liger_kernel": GPU}),
            *_rows("rope", ("full", "partial"), {"eager": ANY, "liger_kernel": GPU, "npu": NPU}),
            *_rows("rope", ("wan",), {"eager": ANY, "triton": GPU, "npu": NPU}),
            *_rows("rope", ("interleave", "mrope"), {"eager": ANY}),
            *_rows("swiglu_mlp", ("standard", "geglu"), {"eager": ANY, "liger_kernel": GPU}),
            *_rows(
                "cross_entropy_loss", ("standard",), {"eager": ANY, "liger_kernel": GPU, "chunk_loss": ANY}
            ),
            *_rows("load_balancing_loss", ("standard",), {"eager": ANY, "triton": GPU}),
            *_rows(
                "moe_experts",
                ("standard",),
                {"eager": ANY, "fused_triton": GPU, "fused_quack": GPU, "fused_npu": NPU, "fused_mlu": MLU},
            ),
            *_rows(
                "moe_experts_lora",
                ("shared", "independent"),
                {"eager": ANY, "fused_triton": GPU, "fused_npu": NPU},
            ),
            *_rows(
                "attention",
                ("standard",),
                {
                    "eager": ANY,
                    "sdpa": ANY,
                    "flex_attention": ANY,
                    "flash_attention_2": ANY,
                    "flash_attention_3": GPU,
                    "flash_attention_4": GPU,
                    "veomni_flash_attention_2": ANY,
                },
            ),
            *_rows("rms_norm_gated", ("standard",), {"eager": ANY, "fla": GPU, "npu": NPU}),
            *_rows("causal_conv1d", ("standard",), {"eager": ANY, "fla": GPU, "npu": NPU}),
            *_rows(
                "chunk_gated_delta_rule",
                ("standard",),
                {"eager": ANY, "fla": GPU, "npu": NPU, "npu_ascendc": NPU, "flash_qla": NPU},
            ),
        ]
    )
)

# ops config field -> op (the contract's table)
CONFIG_FIELD_TO_OP: dict[str, str] = {
    "attn_implementation": "attention",
    "rms_norm_implementation": "rms_norm",
    "rotary_pos_emb_implementation": "rope",
    "rotary_pos_emb_vision_implementation": "rope",
    "swiglu_mlp_implementation": "swiglu_mlp",
    "cross_entropy_loss_implementation": "cross_entropy_loss",
    "moe_implementation": "moe_experts",
    "load_balancing_loss_implementation": "load_balancing_loss",
    "rms_norm_gated_implementation": "rms_norm_gated",
    "causal_conv1d_implementation": "causal_conv1d",
    "chunk_gated_delta_rule_implementation": "chunk_gated_delta_rule",
    "dsa_indexer_implementation": "dsa_indexer",
    "dsa_attention_implementation": "dsa_attention",
    "mhc_implementation": "mhc",
}

# what an ops-config field holds on an NPU host when the user kept its GPU default (VeOmni's NPU default fallback:
# ``OpsImplementationConfig._NPU_DEFAULT_FALLBACK``); a field absent here keeps the user's value
NPU_FIELD_DEFAULTS: dict[str, str] = {
    "rms_norm_implementation": "npu",
    "rotary_pos_emb_implementation": "npu",
    "rotary_pos_emb_vision_implementation": "npu",
    "swiglu_mlp_implementation": "eager",
    "load_balancing_loss_implementation": "eager",
    "cross_entropy_loss_implementation": "npu",
    "moe_implementation": "fused_npu",
}

# OpSlot generation: slot op/variant -> VeomniOp op/variant
OPSLOT_TO_VEOMNIOP: dict[tuple[str, str], tuple[str, str]] = {
    ("rms_norm", "standard"): ("rms_norm", "standard"),
    ("rms_norm", "unweighted"): ("rms_norm", "unweighted"),
    ("rms_norm", "qwen3_5"): ("rms_norm", "offset"),
    ("rotary_pos_emb", "full"): ("rope", "full"),
    ("rotary_pos_emb", "partial"): ("rope", "partial"),
    ("rotary_pos_emb_vision", "full"): ("rope", "full"),
    ("swiglu_mlp", "standard"): ("swiglu_mlp", "standard"),
    ("cross_entropy_loss", "causal"): ("cross_entropy_loss", "standard"),
    ("cross_entropy_loss", "seq_cls"): ("cross_entropy_loss", "standard"),
    ("moe_experts", "standard"): ("moe_experts", "standard"),
}


def rows_for(op: str, variant: str | None = None, rows: tuple[OpRow, ...] = BUILTIN_ROWS) -> list[OpRow]:
    return [r for r in rows if r.op == op and (variant is None or r.variant == variant)]


CATALOG_OFFSET_VARIANT = "offset"


def catalog_rows(offset_variant: str = CATALOG_OFFSET_VARIANT) -> tuple[OpRow, ...]:
    """The built-in rows with the offset RMSNorm variant named ``offset_variant`` (a profile's name)."""
    if offset_variant == CATALOG_OFFSET_VARIANT:
        return BUILTIN_ROWS
    renamed = (
        OpRow(r.op, offset_variant, r.impl, r.requirement)
        if (r.op, r.variant) == ("rms_norm", CATALOG_OFFSET_VARIANT)
        else r
        for r in BUILTIN_ROWS
    )
    return tuple(sorted(set(renamed)))


def slot_target(
    op: str,
    variant: str,
    offset_variant: str = CATALOG_OFFSET_VARIANT,
    vision_rope: tuple[str, str] | None = None,
) -> tuple[str, str] | None:
    """The handle (op, variant) an OpSlot (op, variant) migrates to, in a profile's names: the offset RMSNorm
    is ``offset_variant``, the vision RoPE ``vision_rope`` (when given); None for an unknown slot."""
    target = OPSLOT_TO_VEOMNIOP.get((op, variant))
    if target is None:
        return None
    if target == ("rms_norm", CATALOG_OFFSET_VARIANT):
        return ("rms_norm", offset_variant)
    if op == "rotary_pos_emb_vision" and vision_rope is not None:
        return vision_rope
    return target
