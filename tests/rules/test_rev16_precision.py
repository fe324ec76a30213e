"""Independent precision review (rev16) of the rules added or widened on 2026-12-03: each snippet is correct
code a VeOmni or transformers engineer would write, on which the rule reported (a false positive now fixed)."""

from __future__ import annotations

import pytest

from tests.rules.snippets import lint_snippet

QUIET = {
    # a module-level walrus in an `if` test binds the name the function reads
    "NPU516-module-walrus": (
        "veomni/utils/npu_env.py",
        """
        import os


        if (_NPU_VISIBLE := os.environ.get("ASCEND_RT_VISIBLE_DEVICES")) is not None:
            pass


        def visible_devices():
            return _NPU_VISIBLE
        """,
    ),
    # a module-level `match` capture binds the name
    "NPU516-module-match": (
        "veomni/utils/platform_name.py",
        """
        import sys

        match sys.platform:
            case "linux":
                _SHM = "/dev/shm"
            case other:
                _SHM = other


        def shm_dir():
            return _SHM, other
        """,
    ),
    # `del` marks the parameter unused on purpose
    "NPU317-del-unused": (
        "veomni/ops/kernels/toy_attn/interface.py",
        """
        def chunk_fwd(q, k, v, scale=None, cu_seqlens=None):
            out = q @ k.transpose(-1, -2) * (scale or 1.0)
            if cu_seqlens is not None:
                out = out + cu_seqlens.sum()
            return out @ v


        def attn_npu(q, k, v, scale, cu_seqlens):
            del cu_seqlens  # packed inputs are not supported by this kernel
            return chunk_fwd(q, k, v, scale=scale)
        """,
    ),
    # an override takes the parameter because the abstract interface does
    "NPU317-abstract-interface": (
        "veomni/ops/kernels/toy_attn/backends.py",
        """
        def chunk_fwd(q, k, v, scale=None):
            return q @ k.transpose(-1, -2) * (scale or 1.0) @ v


        class AttentionBackend:
            def compute(self, q, k, v, scale):
                raise NotImplementedError


        class PrescaledBackend(AttentionBackend):
            def compute(self, q, k, v, scale):
                # the scale is folded into the query projection's weights
                return chunk_fwd(q, k, v)
        """,
    ),
    # a 0/1 loss mask, per-token loss weights, a loss scale and an aux-loss coefficient hold no loss values
    "NPU469-mask-weight-scale": (
        "veomni/ops/loss/toy_loss.py",
        """
        import torch
        import torch.nn.functional as F


        def masked_ce(logits, labels, ignore_index=-100):
            loss_mask = labels.ne(ignore_index).to(torch.bfloat16)
            loss_weights = torch.ones_like(labels, dtype=torch.bfloat16)
            loss_scale = torch.ones(1, device=logits.device, dtype=torch.bfloat16)
            aux_loss_coef = torch.tensor(1e-3, dtype=torch.bfloat16, device=logits.device)
            per_token = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), reduction="none")
            loss = (per_token * (loss_mask * loss_weights).flatten().float()).sum() / loss_mask.sum().float()
            return loss * loss_scale.float(), aux_loss_coef
        """,
    ),
    # the buffer is upcast before anything is added to it
    "NPU469-upcast-before-fill": (
        "veomni/ops/loss/toy_loss.py",
        """
        import torch
        import torch.nn.functional as F


        def chunked_ce(hidden, weight, labels, chunk, dtype=torch.bfloat16):
            total_loss = torch.zeros((), device=hidden.device, dtype=torch.bfloat16)
            total_loss = total_loss.float()
            for start in range(0, hidden.size(0), chunk):
                logits = hidden[start : start + chunk] @ weight.t()
                total_loss += F.cross_entropy(logits.float(), labels[start : start + chunk], reduction="sum")
            return total_loss
        """,
    ),
    # `_: KW_ONLY` is a sentinel, not a field the call must pass
    "NPU510-dataclass-kw-only": (
        "veomni/arguments/toy_args.py",
        """
        from dataclasses import KW_ONLY, dataclass


        @dataclass
        class ShardPlan:
            world: int
            _: KW_ONLY
            pad: int = 1


        def make_plan():
            return ShardPlan(8, pad=2)
        """,
    ),
    # the def is rewrapped (or swapped) at module level: its own signature is not what callers get
    "NPU510-def-rebound": (
        "veomni/distributed/toy_comm.py",
        """
        import torch


        def _legacy(fn):
            def wrapper(*args, pad=None, **kwargs):
                return fn(*args, **kwargs)

            return wrapper


        def gather_seq(x, seq_dim, group=None):
            return x


        gather_seq = _legacy(gather_seq)


        def reduce_seq(x, group=None):
            return x


        def _reduce_seq_v2(x, group=None, async_op=False):
            return x


        if hasattr(torch, "npu"):
            reduce_seq = _reduce_seq_v2


        def run(x, group):
            return gather_seq(x, 1, group, pad=2), reduce_seq(x, group, async_op=True)
        """,
    ),
    # the round trip's way back: the inverse all-to-all of the attention output
    "NPU459-round-trip": (
        "veomni/distributed/sequence_parallel/toy_ulysses.py",
        """
        def seq_all_to_all(x, scatter_dim, gather_dim, group):
            return x


        def ulysses_attn(q, scatter_dim, gather_dim, group, attn):
            q = seq_all_to_all(q, scatter_dim, gather_dim, group)
            out = attn(q)
            return seq_all_to_all(out, gather_dim, scatter_dim, group)
        """,
    ),
    # a function named for running its callee backwards
    "NPU459-reverse-named": (
        "veomni/ops/loss/toy_kd.py",
        """
        def kl_div(p, q):
            return (p * (p.log() - q.log())).sum(-1)


        def reverse_kl(p, q):
            return kl_div(q, p)


        def _copy(src, dst):
            dst.copy_(src, non_blocking=True)


        def reload(src, dst):
            _copy(dst, src)
        """,
    ),
    # an unpatched copy in equivalent spellings: `x.size()` for `x.shape`, a plain call's keywords reordered,
    # `b if c else a` for `a if not c else b`
    "NPU458-equivalent-spellings": (
        "veomni/models/transformers/llama/generated/patched_modeling_llama_gpu.py",
        """
        # ==============================================================================
        #  AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
        # ==============================================================================
        #
        #  Source: transformers.models.llama.modeling_llama
        #  Based on: transformers==5.9.0
        #
        #  Patches applied:
        #    - method_override: LlamaModel.forward

        import torch


        def repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
            batch, num_key_value_heads, slen, head_dim = hidden_states.size()
            if n_rep == 1:
                return hidden_states
            hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
            return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


        def eager_attention_forward(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
            key_states = repeat_kv(key, module.num_key_value_groups)
            value_states = repeat_kv(value, module.num_key_value_groups)

            attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
            if attention_mask is not None:
                attn_weights = attn_weights + attention_mask

            attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
            attn_weights = nn.functional.dropout(attn_weights, training=module.training, p=dropout)
            attn_output = torch.matmul(attn_weights, value_states)
            attn_output = attn_output.transpose(1, 2).contiguous()

            return attn_output, attn_weights
        """,
    ),
    # the method is rebound on the instance (an NPU path swapped in by the constructor)
    "NPU510-method-rebound-on-instance": (
        "veomni/models/toy_block.py",
        """
        import torch


        class Block(torch.nn.Module):
            def __init__(self, use_npu=False):
                super().__init__()
                if use_npu:
                    self.attn = self._attn_npu

            def attn(self, x):
                return x

            def _attn_npu(self, x, cu_seqlens=None):
                return x

            def forward(self, x, cu_seqlens):
                return self.attn(x, cu_seqlens=cu_seqlens)
        """,
    ),
    # an optional twin accepted for a uniform signature and unused: no statement of its side reads the other
    "NPU727-optional-twin-unused": (
        "veomni/models/transformers/toy_whisper/attention.py",
        """
        import torch.nn.functional as F


        def whisper_qk(hidden, q_weight, k_weight, q_bias=None, k_bias=None):
            # whisper's key projection has no bias
            q = F.linear(hidden, q_weight, q_bias)
            k = F.linear(hidden, k_weight)
            return q, k
        """,
    ),
    # bf16 buffers of activations, logits and probabilities computed in fp32 and stored in bf16 on purpose
    "NPU469-fp32-compute-bf16-store": (
        "veomni/distributed/moe/toy_combine.py",
        """
        import torch
        import torch.nn.functional as F


        def moe_combine(expert_out, probs, index, num_tokens):
            combined = torch.zeros(num_tokens, expert_out.size(-1), dtype=torch.bfloat16, device=expert_out.device)
            combined[index] = (expert_out.float() * probs.float().unsqueeze(-1)).to(combined.dtype)
            return combined


        def gather_logits(hidden, weight, chunk):
            logits = torch.empty(hidden.size(0), weight.size(0), dtype=torch.bfloat16, device=hidden.device)
            for s in range(0, hidden.size(0), chunk):
                logits[s : s + chunk] = F.linear(hidden[s : s + chunk].float(), weight.float()).to(torch.bfloat16)
            return logits


        def softmax_probs(logits, chunk):
            probs = torch.empty_like(logits, dtype=torch.bfloat16)
            for s in range(0, logits.size(0), chunk):
                probs[s : s + chunk] = F.softmax(logits[s : s + chunk].float(), dim=-1)
            return probs
        """,
    ),
    # the forward sets the attributes through `ctx.__dict__`
    "NPU634-ctx-dict-update": (
        "veomni/distributed/seq_comm.py",
        """
        import torch


        class Gather(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, group, dim):
                ctx.__dict__.update(group=group, dim=dim)
                return x

            @staticmethod
            def backward(ctx, grad):
                return grad, ctx.group, ctx.dim
        """,
    ),
    # a mixin base's forward sets the attribute
    "NPU634-mixin-forward": (
        "veomni/distributed/seq_comm.py",
        """
        import torch


        class _CommMixin:
            @staticmethod
            def forward(ctx, x, group):
                ctx.group = group
                return x


        class AllReduce(_CommMixin, torch.autograd.Function):
            @staticmethod
            def backward(ctx, grad):
                return grad, ctx.group
        """,
    ),
    # a classmethod forward: ctx is its second parameter
    "NPU634-classmethod-forward": (
        "veomni/distributed/seq_comm.py",
        """
        import torch


        class AllReduce(torch.autograd.Function):
            @classmethod
            def forward(cls, ctx, x, group):
                ctx.group = group
                return x

            @staticmethod
            def backward(ctx, grad):
                return grad, ctx.group
        """,
    ),
    # ctx aliased in the forward
    "NPU634-ctx-alias": (
        "veomni/distributed/seq_comm.py",
        """
        import torch


        class AllReduce(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, group):
                state = ctx
                state.group = group
                return x

            @staticmethod
            def backward(ctx, grad):
                return grad, ctx.group
        """,
    ),
}


@pytest.mark.parametrize("case", sorted(QUIET))
def test_quiet(case):
    path, text = QUIET[case]
    code = case.split("-", 1)[0]
    assert lint_snippet(path, text, [code]) == []


def test_npu469_still_reports_a_bf16_sum_upcast_after_the_fill():
    text = """
    import torch
    import torch.nn.functional as F


    def chunked_ce(hidden, weight, labels, chunk):
        loss_sum = torch.zeros((), device=hidden.device, dtype=torch.bfloat16)
        for start in range(0, hidden.size(0), chunk):
            loss_sum += F.cross_entropy(hidden[start : start + chunk].float() @ weight.t(), labels, reduction="sum")
        loss_sum = loss_sum.float()
        return loss_sum
    """
    assert [d.line for d in lint_snippet("veomni/ops/loss/toy_loss.py", text, ["NPU469"])] == [6]


def test_npu459_still_reports_a_second_call_with_the_roles_swapped():
    text = """
    def rot(x, cos, sin):
        return x * cos + x * sin


    def qk_rot(q, k, cos, sin):
        q = rot(q, cos, sin)
        k = rot(k, sin, cos)
        return q, k
    """
    assert [d.line for d in lint_snippet("veomni/ops/toy_rope.py", text, ["NPU459"])] == [7]


def test_npu727_still_reports_an_optional_twin_displaced():
    text = """
    import torch.nn.functional as F


    def qk(hidden, q_weight, k_weight, q_bias=None, k_bias=None):
        q = F.linear(hidden, q_weight, q_bias)
        k = F.linear(hidden, k_weight, q_bias)
        return q, k
    """
    assert [d.line for d in lint_snippet("veomni/models/toy_attn.py", text, ["NPU727"])] == [6]


def test_npu468_message_describes_the_reported_statement():
    text = """
    def apply_rotary(q, k, cos, sin):
        q_embed = (q * cos) + (rotate_half(q) * sin)
        k_embed = (k * cos) - (rotate_half(k) * sin)
        return q_embed, k_embed
    """
    (found,) = lint_snippet("veomni/ops/toy_rope.py", text, ["NPU468"])
    assert found.line == 3
    assert "rotate_half(k) * sin` uses `-` where the reference uses `+`" in found.message
