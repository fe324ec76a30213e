"""NPU458 on an unpatched generated copy: rewrites that keep what upstream computes given the function around them
are quiet (a temporary written out at its uses, SiLU spelled ``x * sigmoid(x)``, an index-only top-k taken on the
logits instead of their softmax over the same axis, a norm submodule applied after a transpose of two leading axes
of a head split); the same places edited so the computation changes are still reported. Each shape is tried in
several upstream modules (the installed transformers, read as a generated file of a VeOmni model)."""

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
#    - method_override: NothingHere.forward
#
# ==============================================================================
"""


def _findings(model: str, old: str, new: str) -> list[str]:
    root = transformers_dir()
    assert root is not None
    text = read_text(str(root / "models" / model / f"modeling_{model}.py"))
    assert text.count(old) >= 1, old
    text = BANNER.format(m=model, v=transformers_version()) + text.replace(old, new, 1)
    path = f"veomni/models/transformers/{model}/generated/patched_modeling_{model}_gpu.py"
    src = SourceFile.from_text(path, text)
    return [d.message for d in lint_source(src, ["NPU458"], Settings()) if d.code == "NPU458"]


SILU = "        hidden_states = hidden_states * F.silu(gate.to(torch.float32))\n"
TOPK = "    _, selected_experts = torch.topk(routing_weights, top_k, dim=-1)\n"
KNORM = "        key_states = self.k_norm(self.k_proj(hidden_states).view(hidden_shape)).transpose(1, 2)\n"
QNORM = "        query_states = self.q_norm(self.q_proj(hidden_states).view(hidden_shape)).transpose(1, 2)\n"


@pytest.mark.parametrize("model", ["qwen3_next", "olmo_hybrid", "qwen3_5"])
def test_unedited_upstream_is_quiet(model: str) -> None:
    assert _findings(model, SILU, SILU) == []


@pytest.mark.parametrize("model", ["qwen3_next", "olmo_hybrid", "qwen3_5"])
@pytest.mark.parametrize(
    "new",
    [
        "        g32 = gate.to(torch.float32)\n        hidden_states = hidden_states * (g32 * torch.sigmoid(g32))\n",
        "        hidden_states = hidden_states * (torch.sigmoid(gate.float()) * gate.float())\n",
        "        hidden_states = hidden_states * torch.nn.functional.silu(gate.float())\n",
        "        act_in = gate.to(dtype=torch.float32)\n        hidden_states = hidden_states * F.silu(act_in)\n",
    ],
)
def test_silu_written_out_is_quiet(model: str, new: str) -> None:
    assert _findings(model, SILU, new) == []


@pytest.mark.parametrize("model", ["qwen3_next", "olmo_hybrid"])
@pytest.mark.parametrize(
    "new",
    [
        # the fp32 upcast dropped, through a temporary
        "        g = gate\n        hidden_states = hidden_states * (g * torch.sigmoid(g))\n",
        # sigmoid alone is not SiLU
        "        g32 = gate.to(torch.float32)\n        hidden_states = hidden_states * torch.sigmoid(g32)\n",
        # a product of two different gates
        "        g32 = gate.to(torch.float32)\n        hidden_states = hidden_states * (g32 * torch.sigmoid(hidden_states))\n",
    ],
)
def test_silu_changed_is_reported(model: str, new: str) -> None:
    assert _findings(model, SILU, new)


@pytest.mark.parametrize("model", ["jamba", "dbrx", "qwen3_omni_moe", "granitemoeshared"])
@pytest.mark.parametrize(
    "new",
    [
        "    _, selected_experts = torch.topk(concatenated_gate_logits, top_k, dim=-1)\n",
        "    _, selected_experts = concatenated_gate_logits.topk(top_k, dim=-1)\n",
        "    _, selected_experts = torch.topk(routing_weights.float(), top_k, -1)\n",
    ],
)
def test_index_only_topk_on_logits_is_quiet(model: str, new: str) -> None:
    assert _findings(model, TOPK, new) == []


@pytest.mark.parametrize("model", ["jamba", "qwen3_omni_moe"])
@pytest.mark.parametrize(
    "new",
    [
        "    _, selected_experts = torch.topk(concatenated_gate_logits, top_k, dim=0)\n",  # another axis
        "    _, selected_experts = torch.topk(-concatenated_gate_logits, top_k, dim=-1)\n",  # the least likely
        "    _, selected_experts = torch.topk(routing_weights, top_k - 1, dim=-1)\n",  # another k
    ],
)
def test_topk_changed_is_reported(model: str, new: str) -> None:
    assert _findings(model, TOPK, new)


@pytest.mark.parametrize(
    ("model", "old"),
    [("qwen3_vl", KNORM), ("qwen3_omni_moe", KNORM), ("qwen3_moe", QNORM), ("qwen3", QNORM)],
)
def test_norm_after_leading_transpose_is_quiet(model: str, old: str) -> None:
    new = old.replace("view(hidden_shape)).transpose(1, 2)", "view(hidden_shape).transpose(1, 2))")
    assert new != old
    assert _findings(model, old, new) == []


@pytest.mark.parametrize(("model", "old"), [("qwen3_vl", KNORM), ("qwen3", QNORM)])
@pytest.mark.parametrize("axes", ["(2, 3)", "(1, -1)", "(1, 3)"])
def test_norm_after_transpose_of_its_axis_is_reported(model: str, old: str, axes: str) -> None:
    new = old.replace("view(hidden_shape)).transpose(1, 2)", f"view(hidden_shape).transpose{axes})")
    assert _findings(model, old, new)
