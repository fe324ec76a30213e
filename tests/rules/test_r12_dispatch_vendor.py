"""Round 12 dispatch/vendor checks: NPU228 (silent eager fallback), NPU307's dtype flow, NPU309 (Ascend kernel
call contracts). Each test pairs a defect with the near-identical correct code."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source


def _codes(source: str, code: str, path: str = "veomni/ops/kernels/toy/npu.py") -> list[int]:
    found = lint_source(SourceFile.from_text(path, textwrap.dedent(source).lstrip()), [code], Settings())
    return [d.line for d in found if d.code == code]


# -- NPU228 ------------------------------------------------------------------------------------------------------

_REGISTRY = """
class Registry:
    def resolve(self, op, variant, impl):
        entry = self._entries.get((op, variant, impl))
        if entry is None:
{body}
        return entry
"""


def test_npu228_unknown_row_swallowed_by_eager() -> None:
    silent = _REGISTRY.format(body='            entry = self._entries[(op, variant, "eager")]')
    said = _REGISTRY.format(
        body='            logger.warning("no row")\n            entry = self._entries[(op, variant, "eager")]'
    )
    raised = _REGISTRY.format(body='            raise KeyError(f"unknown {op}/{variant}/{impl}")')
    assert _codes(silent, "NPU228", "veomni/ops/registry.py") == [5]
    assert _codes(said, "NPU228", "veomni/ops/registry.py") == []
    assert _codes(raised, "NPU228", "veomni/ops/registry.py") == []


def test_npu228_import_error_picks_the_eager_name() -> None:
    source = """
    def pick(requested):
        try:
            from veomni.ops.kernels.toy.npu import kernel  # noqa: F401

            impl = "npu"
        except ImportError:
{body}
        return impl


    def default(impl):
        if impl is None:
            impl = "eager"
        return impl
    """
    silent = source.replace("{body}", '            impl = "eager"')
    requested = source.replace(
        "{body}", '            if requested == "npu":\n                raise\n            impl = "eager"'
    )
    assert _codes(silent, "NPU228") == [6]
    assert (
        _codes(requested, "NPU228") == []
    )  # transformers' pattern: the default falls back, a request raises


# -- NPU307 ------------------------------------------------------------------------------------------------------

_GROUP = """
import torch
import torch_npu


def counts(selected, n):
    c = torch.bincount(selected.view(-1), minlength=n).to(torch.int32)
    return c.tolist(), c{tail}


def forward(x, w, selected, n):
    splits, group_list = counts(selected, n)
    return torch_npu.npu_grouped_matmul([x], [w], group_list=group_list, group_type=0)
"""


def test_npu307_int32_group_list_through_a_helper() -> None:
    assert _codes(_GROUP.format(tail=".contiguous()"), "NPU307") == [12]
    assert _codes(_GROUP.format(tail=".sum(dim=0)"), "NPU307") == []  # integer sum promotes to int64
    assert _codes(_GROUP.format(tail=".long()"), "NPU307") == []


# -- NPU309 ------------------------------------------------------------------------------------------------------


def test_npu309_rms_norm_tuple() -> None:
    bad = """
    import torch_npu


    def f(x, w, eps):
        y = torch_npu.npu_rms_norm(x, w, eps)
        return y.to(x.dtype)
    """
    good = bad.replace("npu_rms_norm(x, w, eps)", "npu_rms_norm(x, w, eps)[0]")
    unpacked = bad.replace("y = torch_npu", "y, _ = torch_npu")
    assert _codes(bad, "NPU309") == [5]
    assert _codes(good, "NPU309") == []
    assert _codes(unpacked, "NPU309") == []


def test_npu309_fusion_attention_layout_head_axis_and_mask() -> None:
    source = """
    import torch
    from torch_npu import npu_fusion_attention


    def f(q, k, v, cu, p):
        mask = torch.triu(torch.ones([2048, 2048]), diagonal=1).bool()
        return npu_fusion_attention(
            q, k, v, q.shape[{axis}], "TND", atten_mask={mask}, keep_prob=1.0 - p,
            actual_seq_qlen=cu, actual_seq_kvlen=cu, sparse_mode=3,
        )[0]
    """
    assert _codes(source.format(axis=1, mask="mask"), "NPU309") == []
    assert _codes(source.format(axis=-2, mask="mask"), "NPU309") == []
    assert _codes(source.format(axis=2, mask="mask"), "NPU309") == [8]
    assert _codes(source.format(axis=1, mask="torch.tril(torch.ones([8, 8])).bool()"), "NPU309") == [8]
    assert _codes(source.format(axis=1, mask="~torch.tril(torch.ones([8, 8])).bool()"), "NPU309") == []


def test_npu309_only_torch_npu_kernels() -> None:
    # a local helper of the same name is not the Ascend kernel
    source = """
    def npu_rms_norm(x, w, eps):
        return x


    def f(x, w, eps):
        return npu_rms_norm(x, eps, w)
    """
    assert _codes(source, "NPU309") == []


def test_npu228_lookup_miss_takes_the_cuda_row() -> None:
    source = """
    class Registry:
        def resolve(self, op, variant, impl):
            entry = self._entries.get((op, variant, impl, device()))
            if entry is None:
                entry = self._entries.get((op, variant, impl, "cuda"))
            if entry is None:
                raise KeyError(op)
            return entry
    """
    assert _codes(source, "NPU228", "veomni/ops/registry.py") == [5]
    assert _codes(source.replace('"cuda"', "ANY_DEVICE"), "NPU228", "veomni/ops/registry.py") == []


def test_npu309_group_list_type_matches_how_the_list_is_built() -> None:
    source = """
    import torch
    import torch_npu


    def f(x, w, selected, n):
        group_list = torch.{build}(selected.view(-1), {extra})
        return torch_npu.npu_grouped_matmul([x], [w], group_list=group_list, group_type=0{kind})[0]
    """
    counts = {"build": "bincount", "extra": "minlength=n"}
    ends = {"build": "cumsum", "extra": "0"}
    assert _codes(source.format(**counts, kind=", group_list_type=1"), "NPU309") == []
    assert _codes(source.format(**counts, kind=""), "NPU309") == [7]
    assert _codes(source.format(**ends, kind=""), "NPU309") == []
    assert _codes(source.format(**ends, kind=", group_list_type=1"), "NPU309") == [7]


# -- veomni.bindnames: near misses -------------------------------------------------------------------------------


def test_binding_name_near_miss_of_another_variant() -> None:
    from npu_lint.veomni.bindnames import variant_contradiction

    variants = frozenset({"standard", "offset", "gated", "qwen3_5"})
    assert variant_contradiction("veomni_rms_norm_qwen35", "rms_norm", "standard", variants) == "qwen3_5"
    assert variant_contradiction("veomni_rms_norm_ofset", "rms_norm", "standard", variants) == "offset"
    # a near miss of the bound variant itself, or a name that spells none, says nothing
    assert variant_contradiction("veomni_rms_norm_standart", "rms_norm", "standard", variants) is None
    assert variant_contradiction("veomni_rms_norm_qwen35", "rms_norm", "qwen3_5", variants) is None
    assert variant_contradiction("veomni_rms_norm", "rms_norm", "standard", variants) is None
    # another version number is not a typo of this one
    assert (
        variant_contradiction("veomni_rms_norm_llama4", "rms_norm", "standard", variants | {"llama3"}) is None
    )


def test_npu309_inverted_masks_reciprocal_sqrt_and_raw_wrappers_are_correct() -> None:
    """Found by the review of the round-12 merge: a `tril(...) == 0` or `1 - tril(...)` mask is inverted, `sqrt(1.0 /
    head_dim)` is the usual scale, and a raw wrapper may return the tuple for its caller to index."""
    source = """
    import math
    import torch
    import torch_npu


    def attn(q, k, v, dropout_p, head_dim):
        mask = torch.tril(torch.ones(q.shape[1], k.shape[1], dtype=torch.bool, device=q.device)) == 0
        out = torch_npu.npu_fusion_attention(
            q, k, v, q.shape[2], "BSND", atten_mask=mask, scale=math.sqrt(1.0 / head_dim), keep_prob=1.0 - dropout_p
        )[0]
        return out


    def attn2(q, k, v):
        mask = (1 - torch.tril(torch.ones(2048, 2048, device=q.device))).bool()
        return torch_npu.npu_fusion_attention(q, k, v, q.shape[2], "BSND", atten_mask=mask, sparse_mode=2)[0]


    def fa_raw(q, k, v, n):
        # caller takes [0]
        return torch_npu.npu_fusion_attention(q, k, v, n, "BSND")
    """
    assert _codes(source, "NPU309") == []


def test_npu228_arithmetic_named_log_does_not_announce_a_fallback() -> None:
    """Found by the review of the round-12 merge: `torch.log(...)` in the fallback branch read as a log message."""
    source = """
    import torch


    def pick(registry, name, scores):
        try:
            impl = registry[name]
        except KeyError:
            scale = torch.log(scores)
            impl = registry["eager"]
        return impl
    """
    assert _codes(source, "NPU228") != []


def test_npu228_a_setting_read_with_an_eager_default_selects_nothing() -> None:
    """`getattr(config, "attn_implementation", "eager")` / `cfg.get("impl", "eager")` read a setting whose default
    is the eager name; the row looked up with "eager" as its key is what falls back."""
    reads = _REGISTRY.format(
        body='            entry = getattr(self.config, "rms_norm_implementation", "eager")'
    )
    gets = _REGISTRY.format(body='            entry = self.settings.get("rms_norm_implementation", "eager")')
    row = _REGISTRY.format(body='            entry = self._entries.get((op, variant, "eager"))')
    assert _codes(reads, "NPU228", "veomni/ops/registry.py") == []
    assert _codes(gets, "NPU228", "veomni/ops/registry.py") == []
    assert _codes(row, "NPU228", "veomni/ops/registry.py") == [5]
