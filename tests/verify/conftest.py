"""Fixtures for ``npu-lint verify`` on the real veomni==0.1.12 wheel.

The wheel (tests/corpus.py) is a VeOmni tree whose ``veomni`` package the checks import. It lacks two things
a VeOmni checkout has, which the fixtures add to their copies:

* ``patchgen``: the wheel ships only the ``veomni.patchgen`` shim over VeOmni's standalone ``patchgen``
  package (``patchgen-pkg/`` of the VeOmni repository, not on PyPI). ``patchgen_dir`` finds it in
  ``$NPU_LINT_PATCHGEN``, in the corpus cache, or fetches that one directory of the repository at
  ``PATCHGEN_COMMIT`` with git into the cache; without it the patchgen-dependent tests skip, naming how to
  provide it.
* the checkout's ``pyproject.toml``: patchgen formats its output with ruff, which reads the repository's
  ruff settings; ``verify_helpers.RUFF_SETTINGS`` are VeOmni's (line length 119, isort with two blank lines after
  imports, ``veomni`` first-party), so regenerated files can equal the committed ones byte for byte.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from corpus import CACHE
from verify_helpers import make_tree

PATCHGEN_REPO = "https://github.com/ByteDance-Seed/VeOmni"
# a VeOmni commit whose patchgen-pkg regenerates every generated file of the 0.1.12 wheel byte for byte
PATCHGEN_COMMIT = "d9774494f5d8042321386c65c9406e732a271501"


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


@pytest.fixture(scope="session", autouse=True)
def _verify_dependencies() -> None:
    for module in ("torch", "transformers", "psutil"):
        if not _has(module):
            pytest.skip(f"`{module}` is not installed: pip install -e '.[verify]' (make test does)")


def _fetch_patchgen(dest: Path) -> Path | None:
    tmp = dest.with_suffix(".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    cmds = [
        ["git", "init", "-q"],
        ["git", "fetch", "-q", "--depth", "1", PATCHGEN_REPO, PATCHGEN_COMMIT],
        ["git", "checkout", "-q", "FETCH_HEAD", "--", "patchgen-pkg"],
    ]
    try:
        for cmd in cmds:
            subprocess.run(cmd, cwd=tmp, check=True, capture_output=True, timeout=300)
    except (OSError, subprocess.SubprocessError):
        shutil.rmtree(tmp, ignore_errors=True)
        return None
    shutil.rmtree(tmp / ".git", ignore_errors=True)
    tmp.rename(dest)
    return dest / "patchgen-pkg"


@pytest.fixture(scope="session")
def patchgen_dir() -> Path:
    """A directory holding VeOmni's ``patchgen`` package (skips the test when there is none)."""
    env = os.environ.get("NPU_LINT_PATCHGEN")
    if env and (Path(env) / "patchgen" / "__init__.py").is_file():
        return Path(env)
    cached = CACHE / f"patchgen-{PATCHGEN_COMMIT}"
    if (cached / "patchgen-pkg" / "patchgen" / "__init__.py").is_file():
        return cached / "patchgen-pkg"
    fetched = _fetch_patchgen(cached)
    if fetched is None:
        pytest.skip(
            f"VeOmni's patchgen is unavailable (not on PyPI; git fetch of {PATCHGEN_REPO}@{PATCHGEN_COMMIT[:8]} "
            "failed): set NPU_LINT_PATCHGEN=<VeOmni checkout>/patchgen-pkg"
        )
    return fetched


@pytest.fixture(scope="session")
def wheel_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One shared, unmodified tree for the end-to-end runs (never write into it)."""
    return make_tree(tmp_path_factory.mktemp("verify-tree"))


@pytest.fixture()
def mutable_tree(tmp_path: Path) -> Path:
    """A tree a test may edit (injected failures)."""
    return make_tree(tmp_path / "tree")
