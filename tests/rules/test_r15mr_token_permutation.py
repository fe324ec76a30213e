"""NPU728: a token permutation applied to one tensor and not to its token-aligned twin, or its inverse applied on
some paths only; in several regions (a generated ViT, a spec, a seed-omni encoder, an MoE kernel, data balancing)
with other names; symmetric code stays quiet."""

from __future__ import annotations

import textwrap

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source

PATHS = [
    "veomni/models/transformers/qwen2_5_omni/generated/patched_modeling_qwen2_5_omni_gpu.py",
    "veomni/models/transformers/qwen2_5vl/qwen2_5_vl_gpu_patch_gen_config.py",
    "veomni/models/seed_omni/encoder/toy_vision/modeling_toy_vision.py",
    "veomni/ops/kernels/moe/toy_sort.py",
    "veomni/utils/data_balance/toy_balance.py",
]


def _lines(code: str, path: str) -> list[int]:
    src = SourceFile.from_text(path, "import torch\n\n\n" + textwrap.dedent(code).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, ["NPU728"], Settings()) if d.code == "NPU728")


TWIN_BAD = [
    # the rotary table reshaped for the window gather, the gather itself dropped
    """
    def vit_forward(self, x, pos, win_idx):
        n, _ = x.size()
        x = x.reshape(n // self.unit, self.unit, -1)
        x = x[win_idx, :, :]
        x = x.reshape(n, -1)
        pos = pos.reshape(n // self.unit, self.unit, -1)
        pos = pos.reshape(n, -1)
        return self.blocks(x, pos)
    """,
    # tokens sorted by expert, their routing weights not
    """
    def sort_tokens(hidden, weights, expert_ids, num_tokens):
        order = torch.argsort(expert_ids)
        hidden = hidden.view(num_tokens, -1)
        weights = weights.view(num_tokens, -1)
        hidden = hidden.index_select(0, order)
        return hidden, weights
    """,
    # samples reordered for balance, their lengths left behind
    """
    def rebalance(features, lengths, perm, total):
        features = features.reshape(total, -1)
        lengths = lengths.reshape(total, -1)
        features = features[perm]
        return features, lengths
    """,
]

TWIN_GOOD = [
    TWIN_BAD[0].replace(
        "        pos = pos.reshape(n, -1)",
        "        pos = pos[win_idx, :, :]\n        pos = pos.reshape(n, -1)",
    ),
    TWIN_BAD[1].replace(
        "        return hidden, weights",
        "        weights = weights.index_select(0, order)\n        return hidden, weights",
    ),
    # a row picked by a loop counter is not a permutation
    """
    def per_row(x, y, total):
        x = x.reshape(total, -1)
        y = y.reshape(total, -1)
        out = []
        for i in range(total):
            out.append(x[i] * 2)
        return out, y
    """,
]

INVERSE_BAD = [
    # restored only under sequence parallelism
    """
    def merge(self, h, window_index, sp):
        h = h[window_index, :]
        out = self.merger(h)
        reverse = torch.argsort(window_index)
        if sp:
            out = gather(out)
            out = out[reverse, :]
        return out
    """,
    # an early return without the restore
    """
    def unsort(self, tokens, sort_idx, return_raw):
        tokens = tokens[sort_idx]
        out = self.experts(tokens)
        inv = sort_idx.argsort()
        if return_raw:
            return out
        return out[inv]
    """,
    # computed and never applied
    """
    def encode(self, feats, perm):
        feats = feats[perm, :]
        inv_perm = torch.argsort(perm)
        return self.proj(feats)
    """,
]

INVERSE_GOOD = [
    INVERSE_BAD[0].replace(
        "        return out", "        else:\n            out = out[reverse, :]\n        return out"
    ),
    INVERSE_BAD[1].replace("            return out\n", "            return out[inv], out\n"),
    # restored after the branch
    """
    def merge(self, h, window_index, sp):
        h = h[window_index, :]
        out = self.merger(h)
        reverse = torch.argsort(window_index)
        if sp:
            out = gather(out)
        out = out[reverse]
        return out
    """,
    # argsort of something never used to permute: a ranking, not an inverse
    """
    def rank(scores, x, idx):
        x = x[idx]
        order = torch.argsort(scores)
        if order.numel() > 3:
            return x
        return order
    """,
]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("code", TWIN_BAD + INVERSE_BAD)
def test_asymmetric_permutation_is_reported(code: str, path: str) -> None:
    assert len(_lines(code, path)) == 1


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("code", TWIN_GOOD + INVERSE_GOOD)
def test_symmetric_permutation_is_quiet(code: str, path: str) -> None:
    assert _lines(code, path) == []
