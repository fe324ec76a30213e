"""NPU625: a tensor indexed with a Python list of per-dimension slices."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source

PATH = "veomni/distributed/sequence_parallel/toy_data.py"


def _lines(text: str) -> list[int]:
    src = SourceFile.from_text(PATH, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, ["NPU625"], Settings()) if d.code == "NPU625")


def test_list_literal_of_slices_and_list_call() -> None:
    assert _lines(
        """
        def pad_cut(x, dim, start, end):
            index = [slice(None), slice(None), slice(None)]
            index[dim] = slice(start, end)
            cut = x[index]
            keep = list(slice(0, s) for s in x.shape)
            return cut, x[keep]
        """
    ) == [4, 6]


def test_closure_and_tuple_forms_are_quiet() -> None:
    assert (
        _lines(
            """
        def cut(x, dim, start, end):
            slc = [slice(None)] * x.dim()
            slc[dim] = slice(start, end)
            ids = [0, 2]
            other = [slice(None)] * 2
            other = tuple(other)
            return x[tuple(slc)], x[ids], x[other]
        """
        )
        == []
    )


def test_gather_lists_built_from_sliced_sequences_are_quiet() -> None:
    # rev13a #1: a slice inside a subscript (`order[:k]`, `[...][::2]`) is no slice object in the list;
    # the lists are gather indices and `tuple(...)` would change what they select.
    assert _lines(
        """
        def keep_topk(tokens, scores, k):
            order = torch.argsort(scores, descending=True).tolist()
            keep = list(order[:k])
            return tokens[keep]

        def every_other(x, n):
            rows = [i for i in range(n)][::2]
            pick = [r for r in rows[1:]]
            return x[pick]

        def shard(x, dim, rank, size):
            slc = [slice(None)] * x.dim()
            slc[dim] = slice(0, size)
            return x[slc]
        """
    ) == [14]


def test_closure_reports_its_own_slice_list_once() -> None:
    assert _lines(
        """
        def outer(x, dim):
            def cut(start, end):
                slc = [slice(None)] * x.dim()
                slc[dim] = slice(start, end)
                return x[slc]
            return cut(0, 1), x[tuple([slice(None)])]
        """
    ) == [5]
