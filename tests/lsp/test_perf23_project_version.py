"""The server's project version takes the project's listing when there is a project, and walks the registry and
helper directories itself only when there is none (issue 19: one listing of the tree per lint, not three)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from npu_lint.lsp import server as srv
from npu_lint.veomni import layout
from tests.lsp.helpers import REPO

TREE = REPO / "tests" / "fixtures" / "trees" / "veomni_op_runtime"


def _touch(path: Path) -> None:
    path.write_text(path.read_text() + "\n# edited\n")
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10_000_000))


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    shutil.copytree(TREE / "veomni", tmp_path / "veomni")
    model = tmp_path / "veomni" / "models_kernel" / "toy"
    model.mkdir()
    (model / "__init__.py").write_text("")
    (model / "modeling_toy.py").write_text("import torch\n")
    return tmp_path


@pytest.mark.parametrize(
    "edited",
    [
        "veomni/models_kernel/utils/op_utils.py",  # a helper module (NPU204's resolvers)
        "veomni/ops/kernels/__init__.py",  # a kernel backend
        "veomni/ops/registry.py",  # a registry module
        "veomni/utils/device.py",
    ],
)
def test_with_a_project_the_listing_is_the_only_walk(
    tree: Path, edited: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(tree / "veomni" / "models_kernel" / "toy" / "modeling_toy.py")
    ls = srv.NpuLintServer()
    settings, _codes = ls.effective(path)
    project = ls.project_for(path, settings)
    assert project is not None and str(tree / edited) in project.tree_files
    walks: list[str] = []
    real_walk = os.walk

    def walk(top, *args, **kwargs):  # noqa: ANN001, ANN202
        walks.append(str(top))
        return real_walk(top, *args, **kwargs)

    monkeypatch.setattr(srv.os, "walk", walk)
    monkeypatch.setattr(layout, "shared_module_files", lambda *a, **k: pytest.fail("listed again"))
    before = ls.project_version(path)
    assert walks == []
    _touch(tree / edited)
    assert ls.project_version(path) != before


def test_without_a_project_the_registry_and_helpers_are_walked(tree: Path) -> None:
    path = str(tree / "veomni" / "models_kernel" / "toy" / "modeling_toy.py")
    ls = srv.NpuLintServer()  # no project built: the fallback
    for edited in ("veomni/models_kernel/utils/op_utils.py", "veomni/ops/registry.py"):
        before = ls.project_version(path)
        _touch(tree / edited)
        assert ls.project_version(path) != before, edited
