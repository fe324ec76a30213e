"""The last review's open items in the dispatch/vendor rules: NPU314 compares with the eager function the
adapter replaces, NPU311 reports a pair of calls in two orders once, NPU225's GPU words live in the vendor map."""

from __future__ import annotations

from pathlib import Path

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from tests.rules.snippets import lint_snippet

_ADAPTER = """
import torch
import torch_npu
from einops import rearrange


def rope_apply_fused(x, **kwargs):
    cos, sin = kwargs.pop("cos"), kwargs.pop("sin")
    x = rearrange(x, "b s (n d) -> b s n d", d=kwargs.pop("head_dim"))
    x_out = torch_npu.npu_rotary_mul(x.float(), cos, sin, rotary_mode="interleave")
    return x_out.to(x.dtype)
"""

_EAGER = """
import torch
from einops import rearrange


def rope_apply(x, **kwargs):
    freqs = kwargs.pop("freqs")
    x = rearrange(x, "b s (n d) -> b s n d", d=kwargs.pop("head_dim"))
    x_out = torch.view_as_real(torch.view_as_complex(x.double().unflatten(-1, (-1, 2))) * freqs){merge}
    return x_out.to(x.dtype)
"""


def _npu314(tmp_path: Path, merge: str) -> list[str]:
    package = tmp_path / "veomni" / "models" / "transformers" / "wan"
    package.mkdir(parents=True)
    (package / "modeling_wan.py").write_text(_EAGER.format(merge=merge))
    adapter = package / "npu_patch.py"
    adapter.write_text(_ADAPTER)
    found = lint_source(SourceFile.from_text(str(adapter), _ADAPTER.lstrip("\n")), ["NPU314"], Settings())
    return [d.message for d in found if d.code == "NPU314"]


def test_npu314_quiet_when_the_eager_function_returns_the_split_layout(tmp_path: Path) -> None:
    # the eager `rope_apply` merges nothing back (its caller wants per-head tensors): the adapter matches it
    assert _npu314(tmp_path, "") == []


def test_npu314_names_the_eager_function_that_merges(tmp_path: Path) -> None:
    found = _npu314(tmp_path, ".flatten(2)")
    assert len(found) == 1 and "`rope_apply` in modeling_wan.py" in found[0]


def test_npu311_one_call_against_one_is_reported_once() -> None:
    source = """
    import torch_npu


    def norm_backward(grad, q, k, norm_q_weight, norm_k_weight, invvar_q, invvar_k):
        grad_k, dw_k = torch_npu.npu_rms_norm_backward(grad, k, norm_k_weight, invvar_k)
        grad_q, dw_q = torch_npu.npu_rms_norm_backward(grad, invvar_q, q, norm_q_weight)
        return grad_q, grad_k, dw_q, dw_k
    """
    found = lint_snippet("veomni/ops/kernels/toy_norm/npu_backward.py", source, ["NPU311"])
    assert [d.line for d in found] == [6]


def test_npu311_the_call_breaking_the_kernels_roles_is_the_one_reported() -> None:
    # npu_rms_norm's documented roles (weight at 1, eps at 2) decide the pair, whichever comes later
    source = """
    import torch_npu


    def norms(x, y, weight, eps):
        a = torch_npu.npu_rms_norm(x, eps, weight)[0]
        b = torch_npu.npu_rms_norm(y, weight, eps)[0]
        return a, b
    """
    found = lint_snippet("veomni/ops/kernels/toy_norm/npu.py", source, ["NPU311"])
    assert [d.line for d in found] == [5]


def test_npu225_reads_its_gpu_words_from_the_vendor_map() -> None:
    from npu_lint.rules.dispatch import npu225_gpu_selection_on_npu_path as rule
    from npu_lint.veomni.vendor_map import GPU_IMPLEMENTATION_WORDS

    assert rule.GpuSelectionOnNpuPath.requires == (GPU_IMPLEMENTATION_WORDS,)
    assert not hasattr(rule, "_GPU_WORDS")
