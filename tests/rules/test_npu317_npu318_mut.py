"""NPU317 (a parameter the caller never reads, left out of the call to a callee that takes it) and NPU318 (a
twin statement with one role word left unswapped), on generic mutants (kwarg-drop, name-swap) of functions of
the real trees copied into one file; the functions as the trees have them stay quiet."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source

# veomni/ops/kernels/rope/full/npu.py (veomni-op-5d90dd16), the kernel module stubbed
ROPE = """
import torch_npu


def forward(q, k, cos, sin, *, unsqueeze_dim=1):
    cos_u = cos.unsqueeze(unsqueeze_dim)
    sin_u = sin.unsqueeze(unsqueeze_dim)
    q_embed = torch_npu.npu_rotary_mul(q, cos_u, sin_u).to(q.dtype)
    k_embed = torch_npu.npu_rotary_mul(k, cos_u, sin_u).to(k.dtype)
    return q_embed, k_embed
"""

# veomni/distributed/sequence_parallel/ulysses.py (veomni-main)
REGION = """
import torch
import torch.distributed as dist


class _AlltoAllRegion(torch.autograd.Function):
    @staticmethod
    def forward(ctx, group, x, input_splits, output_splits):
        ctx.group = group
        ctx.input_splits = input_splits
        ctx.output_splits = output_splits
        input_tensor_list = list(x.split(input_splits, dim=0))
        output_tensor_list = [torch.empty([o, *x.shape[1:]], dtype=x.dtype, device=x.device) for o in output_splits]
        dist.all_to_all(output_tensor_list, input_tensor_list, group=group)
        return torch.cat(output_tensor_list, dim=0)
"""

# veomni/distributed/moe/comm.py (veomni-main)
COMM = """
import torch


class _AllToAll_Async(torch.autograd.Function):
    @staticmethod
    def forward(ctx, group, input, output_split_sizes, input_split_sizes):
        ctx.group = group
        ctx.output_split_sizes = output_split_sizes
        ctx.input_split_sizes = input_split_sizes
        return input
"""

# veomni/ops/kernels/gated_delta_rule/_ascend/chunk_gated_delta_rule_mm.py (veomni-main), callees stubbed
GDR = """
def chunk_fwd_o(q, k, v, h, g=None, scale=None, cu_seqlens=None, chunk_size=64):
    return q * scale if scale is not None else q


def chunk_gated_delta_rule_fwd(q, k, v, g, beta, scale, initial_state, cu_seqlens=None, chunk_size=64):
    h = initial_state
    o = chunk_fwd_o(q=q, k=k, v=v, h=h, g=g, scale=scale, cu_seqlens=cu_seqlens, chunk_size=chunk_size)
    return g, o, beta
"""

# veomni/ops/kernels/attention/ulysses.py (veomni-main), the collective stubbed
ULYSSES = """
def gather_heads_scatter_seq(x, head_dim, seq_dim, group=None):
    return x if group is None else x.transpose(head_dim, seq_dim)


def restore_ulysses_output(output, *, group):
    return gather_heads_scatter_seq(output, seq_dim=1, head_dim=2, group=group)
"""


def _found(text: str, code: str, path: str) -> list[int]:
    src = SourceFile.from_text(path, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, [code], Settings()) if d.code == code)


def _mutant(text: str, old: str, new: str) -> tuple[str, list[int]]:
    assert text.count(old) == 1, old
    out = text.replace(old, new)
    lines = textwrap.dedent(out).lstrip("\n").splitlines()
    return out, [i + 1 for i, line in enumerate(lines) if new in line]


def test_twin_leftovers_in_three_files() -> None:
    for text, path, old, new in (
        (
            ROPE,
            "veomni/ops/kernels/rope/full/npu.py",
            "k_embed = torch_npu.npu_rotary_mul(k,",
            "k_embed = torch_npu.npu_rotary_mul(q,",
        ),
        (ROPE, "veomni/ops/kernels/rope/full/npu.py", "sin_u = sin.unsqueeze", "sin_u = cos.unsqueeze"),
        (
            REGION,
            "veomni/distributed/sequence_parallel/ulysses.py",
            "ctx.input_splits = input_splits",
            "ctx.input_splits = output_splits",
        ),
        (
            COMM,
            "veomni/distributed/moe/comm.py",
            "ctx.output_split_sizes = output_split_sizes",
            "ctx.output_split_sizes = input_split_sizes",
        ),
    ):
        assert _found(text, "NPU318", path) == []
        mutant, lines = _mutant(text, old, new)
        assert _found(mutant, "NPU318", path) == lines, new


def test_shared_reads_are_quiet() -> None:
    text = """
    def project(self, hidden_states, query_layer, key_layer, q_len):
        query_states = self.q_proj(hidden_states).view(1, q_len, -1)
        key_states = self.k_proj(hidden_states).view(1, q_len, -1)
        pos_query = self.pos(query_layer).repeat(query_layer.size(0) // 2, 1)
        pos_key = self.pos(key_layer).repeat(query_layer.size(0) // 2, 1)
        image_mask = input_ids == self.config.image_token_id
        video_mask = input_ids == self.config.image_token_id
        return query_states, key_states, pos_query, pos_key, image_mask, video_mask
    """
    assert _found(text, "NPU318", "veomni/models/transformers/toy/modeling_toy.py") == []


def test_unread_parameter_not_forwarded() -> None:
    for text, path, old, new in (
        (GDR, "veomni/ops/kernels/gated_delta_rule/mm.py", "g=g, scale=scale, cu", "g=g, cu"),
        (ULYSSES, "veomni/ops/kernels/attention/ulysses.py", "head_dim=2, group=group)", "head_dim=2)"),
    ):
        assert _found(text, "NPU317", path) == []
        mutant, lines = _mutant(text, old, new)
        assert _found(mutant, "NPU317", path) == lines, new


def test_equal_defaults_and_unread_callee_parameters_are_quiet() -> None:
    # the caller's optional value has the callee's own default: only an explicit value would be lost
    mutant, _ = _mutant(GDR, "scale=scale, cu_seqlens=cu_seqlens,", "scale=scale,")
    assert _found(mutant, "NPU317", "veomni/ops/kernels/gated_delta_rule/mm.py") == []
    # the callee does not read the parameter either
    text = """
    def flatten(index, name="segmented_flatten"):
        return index


    def segment_reduce(values, index, name):
        return flatten(index), values
    """
    assert _found(text, "NPU317", "veomni/ops/kernels/toy.py") == []
    # the caller reads it (passes a derived value under another name)
    text = text.replace("return flatten(index), values", "return flatten(index), values, name")
    assert _found(text, "NPU317", "veomni/ops/kernels/toy.py") == []
