"""NPU722: a module handing itself to an attention function of the registry lacks `config` (hist24, VeOmni 6d80048d).

transformers' `flash_attention_forward` reads `module.config._attn_implementation` from the module it is handed;
a model-local attention module (Wan) that binds `ALL_ATTENTION_FUNCTIONS[impl]` and calls it with `self` must set
`self.config`, or every non-eager backend raises AttributeError.
"""

from __future__ import annotations

from tests.rules.snippets import lint_snippet

PATH = "veomni/models/transformers/toy/modeling_toy.py"

MODULE = """
from torch import nn
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

TOY_ATTENTION_FUNCTIONS = dict(ALL_ATTENTION_FUNCTIONS)


class AttentionModule(nn.Module):
    def __init__(self, config, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.attention_interface = TOY_ATTENTION_FUNCTIONS[config._attn_implementation]
        self.is_causal = False
{extra}
    def forward(self, q, k, v, **kwargs):
        return self.attention_interface(self, q, k, v, **kwargs)[0]


class LocalLookup(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.impl = config._attn_implementation
{local_extra}
    def forward(self, q, k, v):
        attention_interface = ALL_ATTENTION_FUNCTIONS.get_interface(self.impl, None)
        return attention_interface(self, q, k, v)
"""


def _lines(extra: str = "", local_extra: str = "") -> list[int]:
    text = MODULE.format(extra=extra, local_extra=local_extra)
    return [d.line for d in lint_snippet(PATH, text, ["NPU722"])]


def test_modules_without_config_are_reported_once_each() -> None:
    # the binding in `__init__` (where `self.config` belongs), and the call when the function is a local
    assert _lines() == [11, 25]


def test_modules_that_keep_their_config_are_quiet() -> None:
    assert _lines(extra="        self.config = config\n", local_extra="        self.config = config\n") == []


def test_a_module_with_another_base_is_not_judged() -> None:
    text = MODULE.format(extra="", local_extra="").replace(
        "class AttentionModule(nn.Module)", "class AttentionModule(Mixin, nn.Module)"
    )
    assert [d.line for d in lint_snippet(PATH, text, ["NPU722"])] == [25]
