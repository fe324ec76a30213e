"""Calls of the tree's own functions checked against the callee's signature (issue 20, mutation round): a
required argument left out (NPU510) and a positional argument named like another parameter of the callee
(NPU459). The bad cases are generic mutants (arg-drop, arg-swap) of functions of the real trees, copied with
their callee into one file; the quiet ones are the same functions as the trees have them."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source

# veomni/distributed/chunk_mbs.py (veomni-main)
CHUNK = """
import torch


def _slice_tensor(tensor, seq_range, dim):
    slices = [slice(None)] * tensor.ndim
    slices[dim] = slice(seq_range.token_start, seq_range.token_end)
    return tensor[tuple(slices)]


def _slice_by_sequence_dim(data, seq_range, full_seq_len, dim, name):
    if isinstance(data, torch.Tensor):
        if data.shape[dim] != full_seq_len:
            raise ValueError(f"{name} has the wrong length")
        return _slice_tensor(data, seq_range, dim)
    if isinstance(data, tuple):
        return tuple(_slice_by_sequence_dim(v, seq_range, full_seq_len, dim, name) for v in data)
    return data
"""

# veomni/ops/kernels/rope/full/npu.py with its eager pair (veomni-op-5d90dd16)
ROPE = """
class _Meta:
    def __init__(self, neox, unsqueeze_dim):
        self.neox = neox
        self.unsqueeze_dim = unsqueeze_dim


def eager_forward(q, k, cos, sin, *, unsqueeze_dim=1):
    return (q * cos, k * sin), _Meta(False, unsqueeze_dim)


def eager_backward(grad_output, saved):
    return grad_output, saved


def forward(q, k, cos, sin, *, unsqueeze_dim=1):
    if q.numel() == 0 or k.numel() == 0:
        return eager_forward(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)
    return (q, k), _Meta(False, unsqueeze_dim)


def backward(grad_output, saved):
    return eager_backward(grad_output, saved)
"""

# veomni/distributed/clip_grad_norm.py with the fsdp2 helper it calls (veomni-main)
CLIP = """
def fsdp2_clip_grad_norm(model, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    return max_norm


def veomni_clip_grad_norm(model, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    return fsdp2_clip_grad_norm(model, max_norm, norm_type, error_if_nonfinite, foreach)
"""


def _found(text: str, code: str, path: str = "veomni/distributed/chunk_mbs.py") -> list[int]:
    src = SourceFile.from_text(path, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, [code], Settings()) if d.code == code)


def _mutate(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


def _line(text: str, needle: str) -> list[int]:
    """The line of the one occurrence of ``needle`` in ``text`` as linted."""
    lines = textwrap.dedent(text).lstrip("\n").splitlines()
    hits = [i + 1 for i, line in enumerate(lines) if needle in line]
    assert len(hits) == 1, needle
    return hits


def test_real_functions_are_quiet() -> None:
    for text, path in (
        (CHUNK, "veomni/distributed/chunk_mbs.py"),
        (ROPE, "veomni/ops/kernels/rope/full/npu.py"),
        (CLIP, "veomni/distributed/clip_grad_norm.py"),
    ):
        assert _found(text, "NPU510", path) == []
        assert _found(text, "NPU459", path) == []


def test_required_argument_dropped() -> None:
    for text, path, old, new in (
        (
            CHUNK,
            "veomni/distributed/chunk_mbs.py",
            "_slice_tensor(data, seq_range, dim)",
            "_slice_tensor(data, seq_range)",
        ),
        (
            ROPE,
            "veomni/ops/kernels/rope/full/npu.py",
            "(q, k), _Meta(False, unsqueeze_dim)",
            "(q, k), _Meta(False)",
        ),
        (
            ROPE,
            "veomni/ops/kernels/rope/full/npu.py",
            "return eager_backward(grad_output, saved)",
            "return eager_backward(grad_output)",
        ),
        (
            CLIP,
            "veomni/distributed/clip_grad_norm.py",
            "fsdp2_clip_grad_norm(model, max_norm, norm_type, error_if_nonfinite, foreach)",
            "fsdp2_clip_grad_norm(model, norm_type=norm_type)",
        ),
    ):
        mutant = _mutate(text, old, new)
        assert _found(mutant, "NPU510", path) == _line(mutant, new), new


def test_defaults_keywords_and_spreads_fill_parameters() -> None:
    # a parameter with a default, one given by keyword, a spread: nothing is missing
    assert _found(_mutate(CHUNK, "(data, seq_range, dim)", "(data, seq_range, dim=dim)"), "NPU510") == []
    assert _found(_mutate(CHUNK, "(data, seq_range, dim)", "(data, *rest)"), "NPU510") == []
    assert _found(_mutate(CHUNK, "(data, seq_range, dim)", "(data, **kw)"), "NPU510") == []
    clip = _mutate(CLIP, "(model, max_norm, norm_type, error_if_nonfinite, foreach)", "(model, max_norm)")
    assert _found(clip, "NPU510", "veomni/distributed/clip_grad_norm.py") == []


def test_dataclass_and_named_tuple_fields() -> None:
    text = """
    from dataclasses import dataclass
    from typing import NamedTuple


    @dataclass
    class Plan:
        world: int
        pad: int = 1


    class Meta(NamedTuple):
        neox: bool
        unsqueeze_dim: int = 1


    def build():
        return Plan(pad=2), Meta()
    """
    assert _found(text, "NPU510") == _line(text, "Plan(pad=2), Meta()")
    assert _found(text.replace("Plan(pad=2), Meta()", "Plan(8), Meta(False)"), "NPU510") == []


def test_arguments_named_for_other_parameters() -> None:
    for text, path, old, new in (
        (
            CHUNK,
            "veomni/distributed/chunk_mbs.py",
            "_slice_by_sequence_dim(v, seq_range, full_seq_len, dim, name)",
            "_slice_by_sequence_dim(v, seq_range, dim, full_seq_len, name)",
        ),
        (
            ROPE,
            "veomni/ops/kernels/rope/full/npu.py",
            "eager_forward(q, k, cos, sin, unsqueeze_dim",
            "eager_forward(k, q, cos, sin, unsqueeze_dim",
        ),
        (
            ROPE,
            "veomni/ops/kernels/rope/full/npu.py",
            "return eager_backward(grad_output, saved)",
            "return eager_backward(saved, grad_output)",
        ),
        (
            CLIP,
            "veomni/distributed/clip_grad_norm.py",
            "(model, max_norm, norm_type, error",
            "(max_norm, model, norm_type, error",
        ),
    ):
        mutant = _mutate(text, old, new)
        assert _found(mutant, "NPU459", path) == _line(mutant, new), new


def test_attributes_only_in_a_pure_swap() -> None:
    text = """
    def make_autograd_fn(forward, backward):
        return forward, backward


    def build_projector(feature_size, hidden_size):
        return feature_size * hidden_size


    class Entry:
        def __init__(self, config, forward, backward):
            self.forward = forward
            self.backward = backward
            self.head = build_projector(config.hidden_size, config.output_size)
            self.wrapper = make_autograd_fn(self.forward, self.backward)
    """
    # a config's width handed to the projector's input size is the model's word, not the callee's
    assert _found(text, "NPU459", "veomni/ops/registry.py") == []
    swapped = text.replace(
        "make_autograd_fn(self.forward, self.backward)", "make_autograd_fn(self.backward, self.forward)"
    )
    assert _found(swapped, "NPU459", "veomni/ops/registry.py") == _line(swapped, "self.wrapper =")


def test_autograd_backward_reverses_roles_quietly() -> None:
    text = """
    def all_to_all_tensor(x, scatter_dim, gather_dim, group):
        return x


    class SeqAllToAll:
        @staticmethod
        def forward(ctx, group, local_input, scatter_dim, gather_dim):
            return all_to_all_tensor(local_input, scatter_dim, gather_dim, group)

        @staticmethod
        def backward(ctx, grad):
            return all_to_all_tensor(grad, ctx.gather_dim, ctx.scatter_dim, ctx.group)
    """
    assert _found(text, "NPU459", "veomni/distributed/sequence_parallel/ulysses.py") == []
    forward = text.replace(
        "(local_input, scatter_dim, gather_dim, group)", "(local_input, gather_dim, scatter_dim, group)"
    )
    assert _found(forward, "NPU459", "veomni/distributed/sequence_parallel/ulysses.py") == _line(
        forward, "(local_input, gather_dim"
    )


def test_one_name_misplaced_alone_is_quiet() -> None:
    # a layer's input size is the down projection's output size; a box refinement's new reference points
    text = """
    def mlp_layer(input_dim, output_dim, bn_weight_init=1):
        return input_dim, output_dim


    def refine_bboxes(reference_points, deltas):
        return reference_points + deltas


    def build(hidden_dim, input_dim, topk_coords_logits, reference_points):
        down = mlp_layer(hidden_dim, input_dim)
        return down, refine_bboxes(topk_coords_logits, reference_points)
    """
    assert _found(text, "NPU459", "veomni/models/toy/modeling_toy.py") == []


def test_one_name_twice_is_quiet() -> None:
    # a second conv's (out_channels, out_channels); keys standing in for queries on purpose
    text = """
    def conv_layer(in_channels, out_channels, stride=1):
        return in_channels, out_channels


    def stage(in_channels, out_channels):
        first = conv_layer(in_channels, out_channels)
        second = conv_layer(out_channels, out_channels)
        return first, second
    """
    assert _found(text, "NPU459", "veomni/models/toy/modeling_toy.py") == []
