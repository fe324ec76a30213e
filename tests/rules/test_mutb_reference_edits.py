"""NPU458 (a spec replacement's statement that is upstream's with one small edit) and NPU468 (a twin statement
that is its sibling's with the side swapped and one more change).

The mutants are generated faults (bench/mutate.py's operators) planted in copies of real replacements and model
functions from different files of both real trees; each quiet variant is the real, unmutated code or an
asymmetry both sides keep by design. Upstream is the installed transformers 5.9.0."""

from __future__ import annotations

import textwrap

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source


def _head(module: str) -> str:
    return f"""
import torch
from torch import nn
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(
    source_module="transformers.models.{module}",
    target_file="patched_modeling_toy_gpu.py",
)
"""


SPEC_PATH = "veomni/models/transformers/toy/toy_gpu_patch_gen_config.py"

# veomni-main gemma3 spec: the causal-LM head's slice and the text model's position ids
GEMMA3_TEXT = (
    _head("gemma3.modeling_gemma3")
    + """

@config.override_method("Gemma3TextModel.forward", description="packed-sequence masks")
def gemma3_textmodel_forward_patched(
    self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None, inputs_embeds=None,
    use_cache=None, **kwargs
):
    if (input_ids is None) ^ (inputs_embeds is not None):
        raise ValueError("You must specify exactly one of input_ids or inputs_embeds")

    if inputs_embeds is None:
        inputs_embeds = self.embed_tokens(input_ids)

    if use_cache and past_key_values is None:
        past_key_values = DynamicCache(config=self.config)

    if position_ids is None:
        past_seen_tokens = past_key_values.get_seq_length() if past_key_values is not None else 0
        position_ids = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device) + past_seen_tokens
        position_ids = position_ids.unsqueeze(0)

    causal_mask_mapping = veomni_masks(self.config, inputs_embeds, attention_mask, kwargs)
    hidden_states = inputs_embeds
    position_embeddings = {}
    for layer_type in set(self.config.layer_types):
        position_embeddings[layer_type] = self.rotary_emb(hidden_states, position_ids, layer_type)
    for i, decoder_layer in enumerate(self.layers[: self.config.num_hidden_layers]):
        hidden_states = decoder_layer(
            hidden_states,
            attention_mask=causal_mask_mapping[self.config.layer_types[i]],
            position_embeddings=position_embeddings[self.config.layer_types[i]],
            position_ids=position_ids,
            past_key_values=past_key_values,
            **kwargs,
        )
    hidden_states = self.norm(hidden_states)
    return BaseModelOutputWithPast(last_hidden_state=hidden_states, past_key_values=past_key_values)
"""
)

# VeomniOp-tree qwen3 spec: the attention __init__ binding a rope handle
QWEN3_INIT = (
    _head("qwen3.modeling_qwen3")
    + """

@config.modify_init("Qwen3Attention", description="bind the rope handle")
def qwen3_attention_init_patched(self, config, layer_idx):
    nn.Module.__init__(self)
    self.layer_type = config.layer_types[layer_idx] if hasattr(config, "layer_types") else None
    self.config = config
    self.layer_idx = layer_idx
    self.head_dim = getattr(config, "head_dim", config.hidden_size // config.num_attention_heads)
    self.num_key_value_groups = config.num_attention_heads // config.num_key_value_heads
    self.scaling = self.head_dim**-0.5
    self.attention_dropout = config.attention_dropout
    self.is_causal = True

    self.q_proj = nn.Linear(config.hidden_size, config.num_attention_heads * self.head_dim, bias=config.attention_bias)
    self.k_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=config.attention_bias)
    self.v_proj = nn.Linear(config.hidden_size, config.num_key_value_heads * self.head_dim, bias=config.attention_bias)
    self.o_proj = nn.Linear(config.num_attention_heads * self.head_dim, config.hidden_size, bias=config.attention_bias)
    self.q_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)
    self.k_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)
    self.sliding_window = config.sliding_window if self.layer_type == "sliding_attention" else None
    self.veomni_rope = VeomniOp("rope", "full", resolve_op_impl("rotary_pos_emb_implementation"))
"""
)

# VeomniOp-tree deepseek_v3 spec: a deterministic rotary forward
DEEPSEEK_ROPE = (
    _head("deepseek_v3.modeling_deepseek_v3")
    + """

@config.override_method("DeepseekV3RotaryEmbedding.forward", description="deterministic freqs")
@torch.no_grad()
def deepseek_v3_rotary_embedding_forward_patched(self, x, position_ids):
    inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1).to(x.device)
    position_ids_expanded = position_ids[:, None, :].float()

    device_type = x.device.type if isinstance(x.device.type, str) and x.device.type != "mps" else "cpu"
    with maybe_autocast(device_type=device_type, enabled=False):
        if resolve_op_impl("rotary_pos_emb_implementation") == "triton":
            freqs = triton_bmm(inv_freq_expanded.float(), position_ids_expanded.float()).transpose(1, 2)
        else:
            freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos() * self.attention_scaling
        sin = emb.sin() * self.attention_scaling

    return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)
"""
)

# veomni-main qwen3_omni_moe NPU spec: a replace_function of the vision rotary (upstream writes a tuple assign)
OMNI_ROPE = (
    _head("qwen3_omni_moe.modeling_qwen3_omni_moe")
    + """

@config.replace_function("apply_rotary_pos_emb_vision", description="fused rotary")
def apply_rotary_pos_emb_vision(q, k, cos, sin):
    cos = cos.unsqueeze(-2).float()
    sin = sin.unsqueeze(-2).float()

    q_embed = npu_rotary_mul(q.float(), cos, sin, rotary_mode="half").to(q.dtype)
    k_embed = npu_rotary_mul(k.float(), cos, sin, rotary_mode="half").to(k.dtype)

    return q_embed, k_embed
"""
)


def _lint(path: str, text: str, code: str) -> list[int]:
    src = SourceFile.from_text(path, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, [code], Settings()) if d.code == code)


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.lstrip("\n").splitlines(), 1) if needle in line)


@pytest.mark.parametrize("text", [GEMMA3_TEXT, QWEN3_INIT, DEEPSEEK_ROPE, OMNI_ROPE])
def test_real_replacements_are_quiet(text: str) -> None:
    assert _lint(SPEC_PATH, text, "NPU458") == []
    assert _lint(SPEC_PATH, text, "NPU468") == []


@pytest.mark.parametrize(
    ("text", "old", "new"),
    [
        (GEMMA3_TEXT, "if inputs_embeds is None:", "if inputs_embeds is not None:"),  # cond-negate
        (
            GEMMA3_TEXT,
            "device=inputs_embeds.device) + past_seen_tokens",
            "device=inputs_embeds.device) - past_seen_tokens",
        ),
        (
            QWEN3_INIT,
            "config.num_key_value_heads * self.head_dim, bias",
            "config.num_key_value_heads / self.head_dim, bias",
        ),
        (
            QWEN3_INIT,
            "self.q_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)",
            "self.q_norm = Qwen3RMSNorm(eps=config.rms_norm_eps)",
        ),
        (
            DEEPSEEK_ROPE,
            "cos = emb.cos() * self.attention_scaling",
            "cos = emb.cos() / self.attention_scaling",
        ),
        (
            DEEPSEEK_ROPE,
            "return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)",
            "return cos.to(dtype=x.dtype), sin.to()",
        ),
        (
            OMNI_ROPE,
            "sin = sin.unsqueeze(-2).float()",
            "sin = sin.unsqueeze(-2)",
        ),  # upcast-drop, tuple upstream
        (OMNI_ROPE, "cos = cos.unsqueeze(-2).float()", "cos = cos.unsqueeze(-3).float()"),  # const
    ],
)
def test_one_edit_of_an_upstream_statement_is_reported(text: str, old: str, new: str) -> None:
    assert old in text
    mutated = text.replace(old, new, 1)
    assert _lint(SPEC_PATH, mutated, "NPU458") == [_line_of(mutated, new)]


def test_a_rewrite_that_adds_is_quiet() -> None:
    # a keyword added to upstream's call, and a statement upstream never wrote: not one-token edits
    text = GEMMA3_TEXT.replace(
        "hidden_states = self.norm(hidden_states)", "hidden_states = self.norm(hidden_states, eps=1e-6)"
    )
    text = text.replace(
        "hidden_states = inputs_embeds\n", "hidden_states = inputs_embeds * self.embed_scale\n"
    )
    assert _lint(SPEC_PATH, text, "NPU458") == []


MODEL_PATH = "veomni/models/transformers/toy/modeling_toy.py"
ROTARY = """
import torch


def apply_rotary_pos_emb_vision(q, k, cos, sin):
    orig_q_dtype = q.dtype
    orig_k_dtype = k.dtype
    cos = cos.unsqueeze(-2).float()
    sin = sin.unsqueeze(-2).float()
    q_embed = (q.float() * cos) + (rotate_half(q.float()) * sin)
    k_embed = (k.float() * cos) + (rotate_half(k.float()) * sin)
    return q_embed.to(orig_q_dtype), k_embed.to(orig_k_dtype)
"""
ROPE_CACHE = """
def forward(self, x, position_ids):
    freqs = (self.inv_freq[None, :, None].float() @ position_ids[:, None, :].float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos = emb.cos() * self.attention_scaling
    sin = emb.sin() * self.attention_scaling
    return cos.to(x.dtype), sin.to(x.dtype)
"""
MLP = """
def __init__(self, hidden, inter):
    self.gate_proj = nn.Linear(hidden, inter)
    self.up_proj = nn.Linear(hidden, inter)


def forward(self, x):
    gate = self.gate_proj(x)
    up = self.up_proj(x)
    return self.down_proj(self.act_fn(gate) * up)
"""
ATTN = """
def forward(self, hidden_states, bsz, q_len):
    query_states = self.q_proj(hidden_states) * self.scaling
    key_states = self.k_proj(hidden_states)
    query_states = query_states.view(bsz, q_len, -1, self.head_dim).transpose(1, 2)
    key_states = key_states.view(bsz, q_len, -1, self.head_dim).transpose(1, 2)
    return query_states, key_states
"""
PREFERENCE = """
def rewards(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta):
    chosen_rewards = beta * (policy_chosen_logps - ref_chosen_logps)
    rejected_rewards = beta * (policy_rejected_logps - ref_rejected_logps)
    return chosen_rewards, rejected_rewards
"""
CLAMP = """
def _apply_gate(self, gate, up):
    gate = gate.clamp(min=None, max=self.limit)
    up = up.clamp(min=-self.limit, max=self.limit)
    return gate * torch.sigmoid(gate * self.alpha) * (up + 1)
"""


@pytest.mark.parametrize("text", [ROTARY, ROPE_CACHE, MLP, ATTN, PREFERENCE, CLAMP, OMNI_ROPE])
def test_twin_statements_kept_symmetric_are_quiet(text: str) -> None:
    assert _lint(MODEL_PATH, text, "NPU468") == []


@pytest.mark.parametrize(
    ("text", "old", "new"),
    [
        (ROTARY, "sin = sin.unsqueeze(-2).float()", "sin = sin.unsqueeze(-2)"),  # upcast-drop
        (ROTARY, "k_embed = (k.float() * cos)", "k_embed = (q.float() * cos)"),  # name-swap q/k
        (ROTARY, "(rotate_half(k.float()) * sin)", "(rotate_half(k.float()) * cos)"),  # name-swap cos/sin
        (ROPE_CACHE, "sin = emb.sin() * self.attention_scaling", "sin = emb.sin() / self.attention_scaling"),
        (MLP, "up = self.up_proj(x)", "up = self.gate_proj(x)"),
        (
            PREFERENCE,
            "(policy_rejected_logps - ref_rejected_logps)",
            "(policy_rejected_logps + ref_rejected_logps)",
        ),
        (OMNI_ROPE, "k_embed = npu_rotary_mul(k.float()", "k_embed = npu_rotary_mul(q.float()"),
    ],
)
def test_twin_statement_with_one_more_change_is_reported(text: str, old: str, new: str) -> None:
    assert old in text
    mutated = text.replace(old, new, 1)
    assert _lint(MODEL_PATH, mutated, "NPU468") == [_line_of(mutated, new)]


# NPU469: loss values created in half precision (dtype-swap mutants of three real files)
CHANNEL_CHUNKED = """
import torch
import torch.nn.functional as F


def _logits_chunked(cls, logits, labels_flat, ignore_index):
    seq_len = logits.size(0)
    result = torch.empty(seq_len, device=logits.device, dtype=torch.float32)
    for start in range(0, seq_len, cls.EAGER_CHUNK_SIZE):
        end = min(start + cls.EAGER_CHUNK_SIZE, seq_len)
        result[start:end] = F.cross_entropy(
            logits[start:end].float(),
            labels_flat[start:end],
            ignore_index=ignore_index,
            reduction="none",
        )
    return result
"""
CHANNEL_TOTALS = """
import torch


def _reduce(self, reduced, per_token_loss, source_ids, local_totals, device):
    records = [
        {
            "source_id": item["source_id"],
            "loss_sum": torch.as_tensor(item["loss_sum"], device=per_token_loss.device, dtype=torch.float32),
            "token_count": torch.as_tensor(item["token_count"], device=per_token_loss.device, dtype=torch.int64),
        }
        for item in reduced
    ]
    loss_sums = torch.zeros(len(source_ids), dtype=torch.float32, device=device)
    return records, loss_sums
"""
CHUNK_LOGPROBS = """
import torch


def forward(ctx, h_2d, T, out_requires_grad):
    log_probs = torch.zeros(T, device=h_2d.device, dtype=torch.float32, requires_grad=out_requires_grad)
    entropy = torch.zeros(T, device=h_2d.device, dtype=torch.float32, requires_grad=out_requires_grad)
    hidden = h_2d.to(torch.bfloat16)
    return log_probs, entropy, hidden
"""
DISTILL = """
import torch


def forward(ctx, h_2d, T, out_requires_grad):
    log_probs = torch.zeros(T, device=h_2d.device, dtype=torch.float32, requires_grad=out_requires_grad)
    student_mass = torch.zeros(T, device=h_2d.device, dtype=torch.float32)
    return log_probs, student_mass
"""
TRAINER_PATH = "veomni/trainer/callbacks/channel_loss_callback.py"


@pytest.mark.parametrize("text", [CHANNEL_CHUNKED, CHANNEL_TOTALS, CHUNK_LOGPROBS, DISTILL])
def test_fp32_loss_buffers_and_bf16_activations_are_quiet(text: str) -> None:
    assert _lint(TRAINER_PATH, text, "NPU469") == []


@pytest.mark.parametrize(
    ("text", "old", "new"),
    [
        (
            CHANNEL_CHUNKED,
            "dtype=torch.float32)",
            "dtype=torch.bfloat16)",
        ),  # filled with fp32 cross-entropies
        (CHANNEL_TOTALS, "dtype=torch.float32),", "dtype=torch.bfloat16),"),  # a record's loss sum
        (CHANNEL_TOTALS, "len(source_ids), dtype=torch.float32", "len(source_ids), dtype=torch.bfloat16"),
        (
            CHUNK_LOGPROBS,
            "log_probs = torch.zeros(T, device=h_2d.device, dtype=torch.float32",
            "log_probs = torch.zeros(T, device=h_2d.device, dtype=torch.float16",
        ),
        (
            CHUNK_LOGPROBS,
            "entropy = torch.zeros(T, device=h_2d.device, dtype=torch.float32",
            "entropy = torch.zeros(T, device=h_2d.device, dtype=torch.bfloat16",
        ),
        (
            DISTILL,
            "log_probs = torch.zeros(T, device=h_2d.device, dtype=torch.float32",
            "log_probs = torch.zeros(T, device=h_2d.device, dtype=torch.half",
        ),
    ],
)
def test_loss_values_in_half_precision_are_reported(text: str, old: str, new: str) -> None:
    assert old in text
    mutated = text.replace(old, new, 1)
    assert _lint(TRAINER_PATH, mutated, "NPU469") == [_line_of(mutated, new)]


def test_a_rewritten_branch_and_a_call_of_a_replaced_method_are_quiet() -> None:
    # the test flipped together with a rewritten body (a default filled in): a rewrite, not a negated test;
    # and an argument left out of a call of a method the same spec replaces with another signature
    text = GEMMA3_TEXT.replace(
        "    if inputs_embeds is None:\n        inputs_embeds = self.embed_tokens(input_ids)\n",
        "    if inputs_embeds is not None:\n        inputs_embeds = inputs_embeds * self.embed_scale\n",
    )
    assert "inputs_embeds * self.embed_scale" in text
    assert _lint(SPEC_PATH, text, "NPU458") == []
    replaced = (
        GEMMA3_TEXT.replace(
            "self.rotary_emb(hidden_states, position_ids, layer_type)",
            "self.rotary_emb(hidden_states, position_ids)",
        )
        + """

@config.override_method("Gemma3RotaryEmbedding.rotary_emb", description="one table for every layer type")
def rotary_emb(self, x, position_ids):
    return x, position_ids
"""
    )
    assert _lint(SPEC_PATH, replaced, "NPU458") == []
    # the same argument left out with no replacement of the callee is reported
    dropped = GEMMA3_TEXT.replace(
        "self.rotary_emb(hidden_states, position_ids, layer_type)",
        "self.rotary_emb(hidden_states, position_ids)",
    )
    assert _lint(SPEC_PATH, dropped, "NPU458") == [
        _line_of(dropped, "self.rotary_emb(hidden_states, position_ids)")
    ]
