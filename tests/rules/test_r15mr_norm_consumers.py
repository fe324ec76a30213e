"""NPU458: a copy of an upstream method (a generated copy, patched or not, or a spec's replacement) that still
calls a callee upstream hands a norm's output, but hands it the un-normalised tensor (the norm moved onto another
consumer); tried on several upstream attentions (GLM-DSA, DeepSeek-V3 MLA, Qwen3 q/k norms) with a patched
copy; keeping upstream's flow or reshaping the normalised name stays quiet."""

from __future__ import annotations

import pytest

from npu_lint.core.astutil import transformers_dir, transformers_version
from npu_lint.core.config import Settings
from npu_lint.core.safeio import read_text
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source

BANNER = """# ==============================================================================
#  AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
# ==============================================================================
#
#  Source: transformers.models.{m}.modeling_{m}
#  Based on: transformers=={v}
#
#  Patches applied:
#    - method_override: {patched}
#
# ==============================================================================
"""


def _findings(model: str, patched: str, old: str, new: str) -> list[str]:
    root = transformers_dir()
    assert root is not None
    text = read_text(str(root / "models" / model / f"modeling_{model}.py"))
    assert old in text, old
    text = BANNER.format(m=model, v=transformers_version(), patched=patched) + text.replace(old, new, 1)
    path = f"veomni/models/transformers/{model}/generated/patched_modeling_{model}_npu.py"
    src = SourceFile.from_text(path, text)
    return [d.message for d in lint_source(src, ["NPU458"], Settings()) if d.code == "NPU458"]


GLM_OLD = (
    "            q_resid = self.q_a_layernorm(self.q_a_proj(hidden_states))  # [B, S, q_lora_rank]\n"
    "            query_states = self.q_b_proj(q_resid)\n"
)
CASES = [
    # the DSA indexer handed the raw q_a_proj output
    (
        "glm_moe_dsa",
        "GlmMoeDsaAttention.forward",
        GLM_OLD,
        "            q_resid = self.q_a_proj(hidden_states)\n"
        "            query_states = self.q_b_proj(self.q_a_layernorm(q_resid))\n",
    ),
    # the same through a reshape of the raw name
    (
        "glm_moe_dsa",
        "GlmMoeDsaAttention.forward",
        GLM_OLD,
        "            q_resid = self.q_a_proj(hidden_states).contiguous()\n"
        "            q_normed = self.q_a_layernorm(q_resid)\n"
        "            query_states = self.q_b_proj(q_normed)\n",
    ),
]


@pytest.mark.parametrize(("model", "patched", "old", "new"), CASES)
def test_consumer_handed_the_raw_tensor_is_reported(model: str, patched: str, old: str, new: str) -> None:
    found = _findings(model, patched, old, new)
    assert any("no longer receives" in m for m in found), found


@pytest.mark.parametrize(
    ("model", "patched", "old", "new"),
    [
        ("glm_moe_dsa", "GlmMoeDsaAttention.forward", GLM_OLD, GLM_OLD),
        # the normalised residual renamed and viewed: still the norm's output for both consumers
        (
            "glm_moe_dsa",
            "GlmMoeDsaAttention.forward",
            GLM_OLD,
            "            q_normed = self.q_a_layernorm(self.q_a_proj(hidden_states))\n"
            "            q_resid = q_normed.contiguous()\n"
            "            query_states = self.q_b_proj(q_resid)\n",
        ),
    ],
)
def test_normalised_flow_kept_is_quiet(model: str, patched: str, old: str, new: str) -> None:
    found = _findings(model, patched, old, new)
    assert not any("no longer receives" in m for m in found), found


QWEN3_Q = (
    "        query_states = self.q_norm(self.q_proj(hidden_states).view(hidden_shape)).transpose(1, 2)\n"
)
DSV3_Q = "            q_states = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(hidden_states)))\n"


@pytest.mark.parametrize(
    ("model", "patched", "old", "new"),
    [
        # Qwen3 (and its MoE / VL text twins): the rotary applied to the un-normalised queries
        (
            m,
            p,
            QWEN3_Q,
            "        query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)\n"
            "        normed_q = self.q_norm(query_states)\n",
        )
        for m, p in [
            ("qwen3", "Qwen3Attention.forward"),
            ("qwen3_moe", "Qwen3MoeAttention.forward"),
            ("qwen3_vl", "Qwen3VLTextAttention.forward"),
        ]
    ]
    + [
        # DeepSeek-V3's MLA: q_b_proj given the raw q_a_proj output, the norm computed aside
        (
            "deepseek_v3",
            "DeepseekV3Attention.forward",
            DSV3_Q,
            "            q_a = self.q_a_proj(hidden_states)\n"
            "            q_normed = self.q_a_layernorm(q_a)\n"
            "            q_states = self.q_b_proj(q_a)\n",
        )
    ],
)
def test_transfer_to_other_attentions(model: str, patched: str, old: str, new: str) -> None:
    root = transformers_dir()
    assert root is not None
    upstream = read_text(str(root / "models" / model / f"modeling_{model}.py"))
    assert old in upstream, (
        f"the installed transformers spells {model}'s {patched} otherwise: update the case"
    )
    found = _findings(model, patched, old, new)
    assert any("no longer receives" in m for m in found), found
