"""NPU604: FSDP2 given a gradient divide factor (PREMUL_SUM reduce-scatter) while the tree's HCCL PREMUL_SUM
patch is applied nowhere. Built trees in tmp_path; own names."""

from __future__ import annotations

import textwrap
from pathlib import Path

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni.collectives import read_premul_patches
from npu_lint.veomni.project import load_project

_PATCH = """
import torch
from torch.distributed import ReduceOp


def _scaled(fn):
    def inner(*args, **kwargs):
        if kwargs.get("op") == ReduceOp.PREMUL_SUM:
            kwargs["op"] = ReduceOp.SUM
        return fn(*args, **kwargs)

    return inner


def install_ascend_reduce_fix():
    torch.distributed.reduce_scatter_tensor = _scaled(torch.distributed.reduce_scatter_tensor)
"""

_SHARD = """
def shard(model, factor):
    {install}
    for layer in model.layers:
        layer.moe.set_reduce_scatter_divide_factor(factor)
        layer.moe.set_gradient_divide_factor(factor)
"""


def _tree(tmp_path: Path, install: str) -> Path:
    (tmp_path / "veomni/ops/ascend").mkdir(parents=True)
    (tmp_path / "veomni/ops/ascend/reduce_fix.py").write_text(textwrap.dedent(_PATCH).lstrip())
    (tmp_path / "veomni/parallel").mkdir(parents=True)
    path = tmp_path / "veomni/parallel/sharding.py"
    path.write_text(textwrap.dedent(_SHARD).lstrip().format(install=install))
    return path


def _lint(tmp_path: Path, path: Path) -> list:
    project = load_project([str(tmp_path)])
    return lint_source(
        SourceFile.from_text(str(path), path.read_text()), ["NPU604"], Settings(), project=project
    )


def test_reported_once_naming_the_trees_patch(tmp_path: Path) -> None:
    path = _tree(tmp_path, "pass")
    assert read_premul_patches(tmp_path) == (
        ("install_ascend_reduce_fix", "veomni/ops/ascend/reduce_fix.py", ()),
    )
    diags = _lint(tmp_path, path)
    assert [d.line for d in diags] == [4]
    assert (
        "`install_ascend_reduce_fix` (veomni/ops/ascend/reduce_fix.py) is called nowhere" in diags[0].message
    )


def test_quiet_when_the_file_or_another_applies_it(tmp_path: Path) -> None:
    path = _tree(tmp_path, "install_ascend_reduce_fix()")
    assert _lint(tmp_path, path) == []
    path.write_text(textwrap.dedent(_SHARD).lstrip().format(install="pass"))
    (tmp_path / "veomni/trainer.py").write_text(
        "from .ops.ascend.reduce_fix import install_ascend_reduce_fix\n\ninstall_ascend_reduce_fix()\n"
    )
    assert read_premul_patches(tmp_path)[0][2] == ("veomni/trainer.py",)
    assert _lint(tmp_path, path) == []
