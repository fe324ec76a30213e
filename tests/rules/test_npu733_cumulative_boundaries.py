"""NPU733: a cumulative-lengths vector extended with a new end past its last entry keeps only a constant-length
head. Transfer variants in other regions (a data collator's flash-attention kwargs, an ops kernel's offsets, a
seed_omni encoder, a windowed twin sharing the end) and correct code that must stay quiet."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source


def _lines(text: str, path: str) -> list[int]:
    src = SourceFile.from_text(path, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, ["NPU733"], Settings()) if d.code == "NPU733")


def test_collator_flash_kwargs_extended_from_the_head() -> None:
    text = """
    import torch


    class PackingCollator:
        def __call__(self, batch, pad_len):
            cu_seq_lens_q = batch["cu_seq_lens_q"]
            if pad_len:
                batch["cu_seq_lens_q"] = torch.cat({head}, (cu_seq_lens_q[-1:] + pad_len)))
            return batch
    """
    path = "veomni/data/data_collator_toy.py"
    assert _lines(text.format(head="(cu_seq_lens_q[0:1]"), path) == [8]
    assert _lines(text.format(head="(cu_seq_lens_q[[0]]"), path) == [8]
    assert _lines(text.format(head="(cu_seq_lens_q"), path) == []


def test_ops_offsets_and_a_twin_sharing_the_end() -> None:
    text = """
    import torch


    def extend(offsets, window_offsets, extra):
        end = offsets.max() + extra
        offsets = torch.cat([{a}, end.view(1)])
        window_offsets = torch.cat([{b}, end.view(1)])
        return offsets, window_offsets
    """
    path = "veomni/ops/kernels/attention/toy_varlen.py"
    assert _lines(text.format(a="offsets[0].unsqueeze(0)", b="window_offsets"), path) == [6]
    assert _lines(text.format(a="offsets", b="window_offsets[:2]"), path) == [7]
    assert _lines(text.format(a="offsets", b="window_offsets"), path) == []


def test_correct_heads_stay_quiet() -> None:
    text = """
    import torch


    def seed_omni_audio(tokens, cu, lengths, pad):
        ends = torch.cat([tokens[:1], tokens[-1:]])          # the first and last token, no new end
        rebuilt = torch.cat([cu[:1], lengths.cumsum(0)])     # rebuilt from the leading zero
        merged = torch.cat([cu[:-1], (cu[-1] + pad).view(1)])  # the last boundary moved past the pad
        again = torch.cat([cu[:1], cu[1:] + pad])             # the vector's other entries, shifted
        return ends, rebuilt, merged, again
    """
    assert _lines(text, "veomni/models/seed_omni/encoder/toy/modeling_toy.py") == []
