"""NPU431: a norm built with the eps of a sibling norm of the same class (``eps=self.q_norm.variance_epsilon``,
built the line above with upstream's eps) has upstream's eps; round-12 control, a false positive before."""

from __future__ import annotations

import textwrap

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source

PATH = "veomni/models/transformers/qwen3/qwen3_gpu_patch_gen_config.py"

SPEC = """
from torch import nn
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.qwen3.modeling_qwen3", target_file="patched_modeling_qwen3_gpu.py")


@config.override_method("Qwen3Attention.__init__", description="local attention op")
def qwen3_attention_init_patched(self, config, layer_idx: int):
    nn.Module.__init__(self)
    self.head_dim = getattr(config, "head_dim", config.hidden_size // config.num_attention_heads)
    self.q_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)
    self.k_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)
    self.veomni_attn = attention_op()
"""


def _lines(text: str) -> list[int]:
    src = SourceFile.from_text(PATH, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, ["NPU431"], Settings()) if d.code == "NPU431")


def test_the_sibling_norms_eps_is_upstreams() -> None:
    assert _lines(SPEC) == []
    same = SPEC.replace(
        "self.k_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)",
        "self.k_norm = Qwen3RMSNorm(self.head_dim, eps=self.q_norm.variance_epsilon)",
    )
    assert same != SPEC
    assert _lines(same) == []


@pytest.mark.parametrize(
    ("q_eps", "k_eps"),
    [
        ("1e-5", "self.q_norm.variance_epsilon"),  # the sibling itself built with another eps
        ("config.rms_norm_eps", "1e-5"),
    ],
)
def test_another_eps_is_still_reported(q_eps: str, k_eps: str) -> None:
    text = SPEC.replace(
        "self.q_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)",
        f"self.q_norm = Qwen3RMSNorm(self.head_dim, eps={q_eps})",
    ).replace(
        "self.k_norm = Qwen3RMSNorm(self.head_dim, eps=config.rms_norm_eps)",
        f"self.k_norm = Qwen3RMSNorm(self.head_dim, eps={k_eps})",
    )
    k_line = next(
        i
        for i, line in enumerate(textwrap.dedent(text).lstrip("\n").splitlines(), 1)
        if "self.k_norm =" in line
    )
    assert k_line in _lines(text)
