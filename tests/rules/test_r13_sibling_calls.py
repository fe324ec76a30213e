"""NPU463: a loss kernel's calls in one module are compared with each other (the sibling that forwards a value
is the reference for the one that does not). Quiet on calls that differ on purpose."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source

PATH = "veomni/ops/kernels/cross_entropy/__init__.py"

BASE = """
def causal_lm_loss(hidden_states, weights, labels, shift_labels=None, **kwargs):
    temperature = kwargs.pop("temperature", 1.0)
    teacher_ids = kwargs.pop("teacher_ids", None)
    if teacher_ids is not None:
        log_probs, distill = chunk_distill_function(
            hidden_states, weights, labels, teacher_ids, shift_labels=shift_labels, temperature=temperature
        )
        return log_probs, distill
    return chunk_logprobs_function(hidden_states, weights, labels, shift_labels=shift_labels, temperature=temperature)


def chunk_loss_dispatch(*args, **kwargs):
    temperature = kwargs.pop("temperature", 1.0)
    teacher_ids = kwargs.pop("teacher_ids", None)
    hidden_states, weights, labels = kwargs.get("hidden_states"), kwargs.get("weights"), kwargs.get("labels")
    if teacher_ids is not None:
        log_probs, distill = chunk_distill_function(
            hidden_states, weights, labels, teacher_ids, shift_labels=kwargs.get("shift_labels"), temperature=temperature
        )
        return log_probs, distill
    return chunk_logprobs_function(
        hidden_states, weights, labels, shift_labels=kwargs.get("shift_labels"), temperature=temperature
    )
"""


def _lines(text: str) -> list[int]:
    src = SourceFile.from_text(PATH, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, ["NPU463"], Settings()) if d.code == "NPU463")


def _line_of(text: str, needle: str, nth: int = 1) -> int:
    hits = [i for i, line in enumerate(textwrap.dedent(text).lstrip("\n").splitlines(), 1) if needle in line]
    return hits[nth - 1]


def test_consistent_siblings_are_quiet() -> None:
    assert _lines(BASE) == []


def test_a_popped_value_left_out_is_reported() -> None:
    edited = BASE.replace(
        'shift_labels=kwargs.get("shift_labels"), temperature=temperature\n    )',
        'shift_labels=kwargs.get("shift_labels")\n    )',
    )
    assert edited != BASE
    assert _lines(edited) == [
        _line_of(edited, 'hidden_states, weights, labels, shift_labels=kwargs.get("shift_labels")')
    ]


def test_one_local_for_two_parameters_is_reported() -> None:
    edited = BASE.replace(
        'teacher_ids, shift_labels=kwargs.get("shift_labels"), temperature',
        "teacher_ids, shift_labels=labels, temperature",
    )
    assert edited != BASE
    assert _lines(edited) == [_line_of(edited, "shift_labels=labels")]


def test_a_value_handed_on_under_another_keyword_is_quiet() -> None:
    """``cu_seqlens_k=cu_seqlens_m``: the local reaches the call, under the keyword this call needs."""
    text = """
    def forward_loss(x, w, cu_seqlens_m):
        return grouped_loss(x, w, cu_seqlens_m=cu_seqlens_m)


    def backward_loss(x, w, cu_seqlens_m):
        return grouped_loss(x.T, w, cu_seqlens_k=cu_seqlens_m)
    """
    assert _lines(text) == []


def test_a_keyword_the_caller_passes_elsewhere_to_the_same_kernel_is_quiet() -> None:
    """The caller hands ``index`` to the kernel in one call and not the next: a deliberate choice."""
    text = """
    def fwd(x, w, index):
        a = fused_loss(x, w, index=index)
        b = fused_loss(a, w)
        return b


    def other(x, w, index):
        return fused_loss(x, w, index=index)
    """
    assert _lines(text) == []


def test_a_name_bound_only_in_a_finished_branch_is_quiet() -> None:
    """``mass`` is bound in the branch that returned: it cannot reach the call below."""
    text = """
    def wrapper(x, teacher=None):
        if teacher is not None:
            mass = teacher.sum()
            return loss_output(x, mass=mass)
        return loss_output(x)


    def other(x, mass):
        return loss_output(x, mass=mass)
    """
    assert _lines(text) == []


def test_constructors_and_non_loss_functions_are_not_compared() -> None:
    text = """
    def a(x, activation):
        return conv_layer(x, activation=activation)


    def b(x, activation):
        return conv_layer(x)
    """
    assert _lines(text) == []
