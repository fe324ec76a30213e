"""The import reading of `veomni.opdefs` is kept per parsed tree: an edited file (a new tree) gets a new answer."""

from __future__ import annotations

import ast

from npu_lint.veomni.opdefs import imports_package


def test_imports_read_once_per_tree_and_again_for_an_edited_file(tmp_path) -> None:  # noqa: ANN001
    root = str(tmp_path)
    file = str(tmp_path / "veomni" / "ops" / "kernels" / "gdr.py")
    before = ast.parse("import fla_npu  # noqa: F401\nimport torch\n")
    after = ast.parse("import torch\n")
    assert imports_package(file, root, "fla_npu", before)
    assert imports_package(file, root, "fla_npu", before)  # the kept answer
    assert not imports_package(file, root, "fla_npu", after)  # the edited file's own answer
    assert imports_package(file, root, "torch", after)
