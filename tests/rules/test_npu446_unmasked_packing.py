"""NPU446, widened: a packing collator that concatenates the samples' labels without masking any boundary.

Written in VeOmni's collator shapes with other names and call forms than the dev case."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source

PATH = "veomni/data/toy_collator.py"


def _lines(text: str, path: str = PATH) -> list[int]:
    src = SourceFile.from_text(path, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, ["NPU446"], Settings()) if d.code == "NPU446")


def test_function_packer_without_masking() -> None:
    assert _lines(
        """
        import torch

        KEYS = ("input_ids", "labels", "position_ids")


        def pack_samples(features):
            gathered = {k: [] for k in KEYS}
            for sample in features:
                for k in KEYS:
                    gathered[k].append(sample[k])
            return {k: torch.concat(gathered[k], dim=0).unsqueeze(0) for k in KEYS}
        """
    ) == [11]


def test_labels_list_in_a_collator_class() -> None:
    assert _lines(
        """
        import torch


        class FlatCollator:
            def __call__(self, features):
                ids, labels = [], []
                for f in features:
                    ids.append(f["input_ids"])
                    labels.append(f["labels"])
                return {"input_ids": torch.cat(ids), "labels": torch.cat(labels)}
        """
    ) == [10]


def test_masked_packer_is_quiet() -> None:
    assert (
        _lines(
            """
            import torch

            from veomni.utils.constants import IGNORE_INDEX


            class PackCollator:
                def __call__(self, features):
                    labels = []
                    for i, f in enumerate(features):
                        row = f["labels"].clone()
                        if i:
                            row[0] = IGNORE_INDEX
                        labels.append(row)
                    return {"labels": torch.cat(labels, dim=-1)}
            """
        )
        == []
    )


def test_padding_and_pair_concatenation_are_not_packing() -> None:
    assert (
        _lines(
            """
            import torch
            from torch.nn.utils.rnn import pad_sequence


            class PadCollator:
                def __call__(self, features):
                    rows = []
                    for f in features:
                        rows.append(f["labels"])
                    padded = pad_sequence(rows, batch_first=True)
                    return {"labels": torch.cat((padded, padded[:, :1]), dim=-1)}
            """
        )
        == []
    )


def test_unnamed_helper_is_not_judged() -> None:
    # neither the function nor a class is named for packing or collation: a generic concatenation helper
    assert (
        _lines(
            """
            import torch


            def merge_chunks(chunks):
                out = []
                for c in chunks:
                    out.append(c["labels"])
                return torch.cat(out)
            """
        )
        == []
    )
