"""Fixtures for ``npu-lint verify`` on a copy of VeOmni's public ``main`` (``../shared/corpora/veomni-main``).

The shared tree is a VeOmni checkout: its ``veomni`` package, its ``pyproject.toml`` (the transformers pin,
``[tool.patchgen]`` and the ruff settings patchgen formats with, so regenerated files can equal the committed
ones byte for byte) and its real ``patchgen-pkg/`` (VeOmni's standalone generator, not on PyPI). CI has the
corpora read-only: every tree a test runs on is a copy, and ``patchgen_dir`` is a copy of ``patchgen-pkg``.
A missing corpus or dependency fails the tests (``make test`` installs torch, transformers and psutil).
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest
from corpus import VEOMNI_MAIN, shared_tree
from verify_helpers import make_tree


@pytest.fixture(scope="session", autouse=True)
def _verify_dependencies() -> None:
    missing = [m for m in ("torch", "transformers", "psutil") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} not installed: pip install -e '.[verify]' (make test does)")


@pytest.fixture(scope="session")
def patchgen_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A writable copy of the tree's own ``patchgen-pkg`` (the directory holding the ``patchgen`` package)."""
    source = shared_tree(VEOMNI_MAIN) / "patchgen-pkg"
    dest = tmp_path_factory.mktemp("patchgen") / "patchgen-pkg"
    shutil.copytree(source, dest, ignore=shutil.ignore_patterns("__pycache__"))
    assert (dest / "patchgen" / "__init__.py").is_file(), f"no patchgen package in {source}"
    return dest


@pytest.fixture(scope="session")
def main_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One shared, unmodified copy of the tree for the end-to-end runs (never write into it)."""
    return make_tree(tmp_path_factory.mktemp("verify-tree"))


@pytest.fixture()
def mutable_tree(tmp_path: Path) -> Path:
    """A copy of the tree a test may edit (injected failures)."""
    return make_tree(tmp_path / "tree")
