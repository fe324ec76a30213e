"""NPU605: an HCCL PREMUL_SUM patch that leaves out a collective FSDP2 sends the op through. Own shapes."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source


def _lint(code: str) -> list:
    src = SourceFile.from_text("veomni/distributed/ascend_fixes.py", textwrap.dedent(code).lstrip())
    return lint_source(src, ["NPU605"], Settings())


def test_setattr_patch_without_the_all_reduce() -> None:
    code = """
    import torch
    from torch.distributed import ReduceOp

    PREMUL = ReduceOp.PREMUL_SUM


    def make(fn):
        return fn


    def patch_collectives_for_hccl():
        setattr(torch.distributed, "reduce_scatter_tensor", make(torch.distributed.reduce_scatter_tensor))
        torch.distributed.reduce = make(torch.distributed.reduce)
    """
    diags = _lint(code)
    assert [d.line for d in diags] == [11]
    assert "patches `reduce`, `reduce_scatter_tensor` for PREMUL_SUM but not `all_reduce`" in diags[0].message


def test_quiet_when_both_are_wrapped_or_no_premul_in_the_file() -> None:
    code = """
    from torch import distributed
    from torch.distributed import ReduceOp


    def wrap(fn):
        return fn


    def apply_fix():
        distributed.all_reduce = wrap(distributed.all_reduce)
        distributed.reduce_scatter_tensor = wrap(distributed.reduce_scatter_tensor)
        assert ReduceOp.PREMUL_SUM
    """
    assert _lint(code) == []
    assert (
        _lint(
            code.replace(
                "distributed.reduce_scatter_tensor = wrap(distributed.reduce_scatter_tensor)\n", ""
            ).replace("ReduceOp.PREMUL_SUM", "ReduceOp.SUM")
        )
        == []
    )
