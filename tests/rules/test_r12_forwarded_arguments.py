"""Round 12: a wrapper forwarding its parameters to a function whose signature names them in another order
(NPU459, ``losspath.swapped_arguments``)."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source

PATH = "veomni/ops/kernels/load_balancing_loss/__init__.py"

CODE = """
def balance_pytorch(gate_logits, num_experts=None, top_k=2, attention_mask=None):
    return gate_logits


_balance = balance_pytorch


def balance(gate_logits, num_experts=None, top_k=2, attention_mask=None):
    return _balance(gate_logits, num_experts, top_k, attention_mask)
"""


def _lines(text: str) -> list[int]:
    src = SourceFile.from_text(PATH, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, ["NPU459"], Settings()) if d.code == "NPU459")


def test_forwarded_in_order_is_quiet() -> None:
    assert _lines(CODE) == []
    # other names than the callee's parameters, and keywords, say nothing about the order
    assert (
        _lines(CODE.replace("num_experts, top_k, attention_mask)", "top_k=top_k, num_experts=num_experts)"))
        == []
    )
    assert (
        _lines(CODE.replace("_balance(gate_logits, num_experts, top_k", "_balance(gate_logits, 8, top_k"))
        == []
    )


def test_swapped_through_an_alias_is_reported() -> None:
    assert _lines(
        CODE.replace("num_experts, top_k, attention_mask)", "top_k, num_experts, attention_mask)")
    ) == [9]


def test_swapped_into_a_local_def_is_reported() -> None:
    code = CODE.replace(
        "return _balance(gate_logits, num_experts", "return balance_pytorch(gate_logits, top_k"
    )
    code = code.replace("top_k, attention_mask)\n", "num_experts, attention_mask)\n", 1)
    assert "balance_pytorch(gate_logits, top_k, num_experts, attention_mask)" in code
    assert _lines(code) == [9]
