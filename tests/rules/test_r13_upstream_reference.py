"""Round 13: NPU458 compares more code with the upstream transformers code it copies or replaces.

* a spec's ``override_method`` replacement against the upstream method it replaces (the eager body a patch keeps
  below its kernel guard, and what a rewrite must keep: which norm submodule normalises which tensor, how many
  terms a loss coefficient scales, whether ``1 + weight`` is formed in fp32);
* a generated module's methods no patch names against upstream, statement for statement (any change but an
  equivalent spelling is reported).

The upstream classes are transformers 5.9.0's (the installed version, checked by test_r12_upstream_copy)."""

from __future__ import annotations

import ast
import textwrap

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from tests.rules.test_r12_upstream_copy import ROUTER  # the same upstream router text

SPEC_PATH = "veomni/models/transformers/qwen3_5_moe/qwen3_5_moe_gpu_patch_gen_config.py"
SPEC_HEAD = """
import torch
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(
    source_module="transformers.models.qwen3_5_moe.modeling_qwen3_5_moe",
    target_file="patched_modeling_qwen3_5_moe_gpu.py",
)
"""

NORM_PATCH = """

@config.override_method("Qwen3_5MoeRMSNorm.forward", description="kernel guard")
def qwen3_5_moe_rmsnorm_forward_patched(self, x):
    if veomni_rms_norm.use_non_eager_impl:
        return veomni_rms_norm(x, self.weight, self.eps)
    output = self._norm(x.float())
    output = output * (1.0 + self.weight.float())
    return output.type_as(x)
"""

QWEN3_SPEC_HEAD = SPEC_HEAD.replace("qwen3_5_moe.modeling_qwen3_5_moe", "qwen3.modeling_qwen3")
ATTENTION_PATCH = """

@config.override_method("Qwen3Attention.forward", description="SP all-to-all around attention")
def qwen3_attention_forward_patched(self, hidden_states, position_embeddings, attention_mask, past_key_values=None, **kwargs):
    input_shape = hidden_states.shape[:-1]
    hidden_shape = (*input_shape, -1, self.head_dim)
    query_states = self.q_norm(self.q_proj(hidden_states).view(hidden_shape)).transpose(1, 2)
    key_states = self.k_norm(self.k_proj(hidden_states).view(hidden_shape)).transpose(1, 2)
    value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
    query_states, key_states, value_states = gather_heads_scatter_seq(query_states, key_states, value_states)
    cos, sin = position_embeddings
    query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
    attn_output, attn_weights = sp_attention(self, query_states, key_states, value_states, attention_mask, **kwargs)
    return self.o_proj(attn_output.reshape(*input_shape, -1).contiguous()), attn_weights
"""

QWEN3_MOE_SPEC_HEAD = SPEC_HEAD.replace("qwen3_5_moe.modeling_qwen3_5_moe", "qwen3_moe.modeling_qwen3_moe")
CAUSAL_PATCH = """

@config.override_method("Qwen3MoeForCausalLM.forward", description="fused loss")
def qwen3_moe_forcausallm_forward_patched(self, input_ids=None, labels=None, **kwargs):
    outputs = self.model(input_ids=input_ids, **kwargs)
    hidden_states = outputs.last_hidden_state
    loss, logits = fused_loss(hidden_states, self.lm_head.weight, labels, **kwargs)
    aux_loss = load_balancing_loss_func(outputs.router_logits, self.num_experts, self.num_experts_per_tok)
    if labels is not None:
        loss = loss + self.router_aux_loss_coef * aux_loss.to(loss.device)
    return MoeCausalLMOutputWithPast(loss=loss, aux_loss=aux_loss, logits=logits)
"""


def _lint(path: str, text: str) -> list[int]:
    src = SourceFile.from_text(path, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, ["NPU458"], Settings()) if d.code == "NPU458")


def _line_of(text: str, needle: str) -> int:
    return next(
        i for i, line in enumerate(textwrap.dedent(text).lstrip("\n").splitlines(), 1) if needle in line
    )


@pytest.mark.parametrize(
    ("head", "body"),
    [(SPEC_HEAD, NORM_PATCH), (QWEN3_SPEC_HEAD, ATTENTION_PATCH), (QWEN3_MOE_SPEC_HEAD, CAUSAL_PATCH)],
)
def test_faithful_spec_patches_are_quiet(head: str, body: str) -> None:
    assert _lint(SPEC_PATH, head + body) == []


@pytest.mark.parametrize(
    ("head", "body", "old", "new", "needle"),
    [
        # the offset formed in the weight's dtype, then upcast (1 + 0.003 == 1 in bf16)
        (
            SPEC_HEAD,
            NORM_PATCH,
            "(1.0 + self.weight.float())",
            "(1.0 + self.weight).float()",
            "(1.0 + self.weight)",
        ),
        # the eager body's upcast dropped below the guard
        (SPEC_HEAD, NORM_PATCH, "self._norm(x.float())", "self._norm(x)", "self._norm(x)"),
        # the key states normalised by the query norm (a copy-paste of the line above)
        (
            QWEN3_SPEC_HEAD,
            ATTENTION_PATCH,
            "key_states = self.k_norm(",
            "key_states = self.q_norm(",
            "key_states = self.q_norm(",
        ),
        # the aux-loss coefficient scaling the language-model loss as well
        (
            QWEN3_MOE_SPEC_HEAD,
            CAUSAL_PATCH,
            "loss = loss + self.router_aux_loss_coef * aux_loss.to(loss.device)",
            "loss = self.router_aux_loss_coef * (loss + aux_loss.to(loss.device))",
            "self.router_aux_loss_coef * (loss",
        ),
    ],
)
def test_spec_patch_edits_are_reported(head: str, body: str, old: str, new: str, needle: str) -> None:
    edited = head + body.replace(old, new)
    assert edited != head + body
    assert _lint(SPEC_PATH, edited) == [_line_of(edited, needle)]


def test_a_fused_qk_norm_that_reads_both_weights_is_quiet() -> None:
    """A patch that hands both norms' weights to one fused kernel mentions ``self.k_norm``: not a substitution."""
    fused = ATTENTION_PATCH.replace(
        "    key_states = self.k_norm(self.k_proj(hidden_states).view(hidden_shape)).transpose(1, 2)\n",
        "    key_states = fused_norm(self.k_proj(hidden_states), self.k_norm.weight).transpose(1, 2)\n",
    )
    assert fused != ATTENTION_PATCH
    assert _lint(SPEC_PATH, QWEN3_SPEC_HEAD + fused) == []


GEN_PATH = "veomni/models/transformers/qwen3_moe/generated/patched_modeling_qwen3_moe_gpu.py"
GEN_HEAD = """
# ==============================================================================
#  AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
# ==============================================================================
#
#  Source: transformers.models.qwen3_moe.modeling_qwen3_moe
#  Based on: transformers==5.9.0
#
#  Patches applied:
#    - method_override: Qwen3MoeRMSNorm.forward
#
# ==============================================================================

import torch
from torch import nn
"""

# transformers 5.9.0 Qwen3MoeForCausalLM.forward's loss block is long; the unpatched copy tested here is the
# router (no patch names it; ROUTER, shared with test_r12_upstream_copy), and the load-balancing helper (a
# module-level function no patch names).


@pytest.mark.parametrize(
    ("old", "new", "needle"),
    [
        # a slice taken from the other end, an argument dropped, a constant changed: not numeric "features",
        # still not upstream's code
        (
            "hidden_states.reshape(-1, self.hidden_dim)",
            "hidden_states.reshape(self.hidden_dim, -1)",
            "reshape(",
        ),
        (
            "torch.topk(router_probs, self.top_k, dim=-1)",
            "torch.topk(router_probs, self.top_k)",
            "torch.topk(",
        ),
        (
            "        router_scores = router_top_value\n",
            "        router_scores = router_top_value[:, :1]\n",
            "[:, :1]",
        ),
    ],
)
def test_unpatched_generated_edits_are_reported(old: str, new: str, needle: str) -> None:
    edited = GEN_HEAD + ROUTER.replace(old, new)
    assert edited != GEN_HEAD + ROUTER
    assert _lint(GEN_PATH, edited) == [_line_of(edited, needle)]


def test_unpatched_generated_equivalent_spellings_are_quiet() -> None:
    assert _lint(GEN_PATH, GEN_HEAD + ROUTER) == []
    same = ROUTER.replace(
        "router_top_value /= router_top_value.sum(dim=-1, keepdim=True)",
        "router_top_value = router_top_value / router_top_value.sum(-1, keepdim=True)",
    ).replace(
        "softmax(router_logits, dtype=torch.float, dim=-1)",
        "softmax(router_logits, dim=-1, dtype=torch.float)",
    )
    assert same != ROUTER
    assert _lint(GEN_PATH, GEN_HEAD + same) == []
    # a docstring, `view` for `reshape`, `transpose`'s axes in the other order, a functional reduction
    same = ROUTER.replace(
        "    def forward(self, hidden_states):\n",
        '    def forward(self, hidden_states):\n        """Route."""\n',
    ).replace("hidden_states.reshape(-1, self.hidden_dim)", "hidden_states.view(-1, self.hidden_dim)")
    same = same.replace(
        "router_top_value.sum(dim=-1, keepdim=True)", "torch.sum(router_top_value, -1, keepdim=True)"
    )
    assert '"""Route."""' in same and "view(" in same and "torch.sum(" in same
    assert _lint(GEN_PATH, GEN_HEAD + same) == []


def test_a_patched_method_is_not_held_to_upstream_statement_by_statement() -> None:
    """The banner names the router's forward: a patch's rewrite is judged on numerics only."""
    head = GEN_HEAD.replace("Qwen3MoeRMSNorm.forward", "Qwen3MoeTopKRouter.forward")
    edited = head + ROUTER.replace(
        "torch.topk(router_probs, self.top_k, dim=-1)", "torch.topk(router_probs, self.top_k)"
    )
    assert _lint(GEN_PATH, edited) == []


def test_commuted_operands_and_constant_fills_are_equivalent() -> None:
    """`w + 1.0` for `1.0 + w` and `init.constant_(w, 0.0)` for `init.zeros_(w)` compute the same."""
    from npu_lint.veomni.losspath import _canon_key

    def key(src: str) -> str:
        return _canon_key(ast.parse(src).body[0])

    assert key("y = x * (1.0 + w.float())") == key("y = (w.float() + 1.0) * x")
    assert key("init.zeros_(m.weight)") == key("init.constant_(m.weight, 0.0)")
    assert key("init.ones_(m.weight)") == key("init.constant_(m.weight, 1)")
    assert key("y = a - b") != key("y = b - a")
    assert key("init.zeros_(m.weight)") != key("init.constant_(m.weight, 0.5)")
