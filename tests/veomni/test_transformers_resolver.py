"""One resolver of the transformers source: NPU_LINT_TRANSFORMERS_SRC is honoured by every reader of it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from npu_lint.core import astutil
from npu_lint.rules.packaging import _shared as packaging
from npu_lint.veomni import upstream, vlmtypes

MODULE = "transformers.models.toyx.modeling_toyx"


@pytest.fixture
def fake_src(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A transformers source tree of our own writing (version 0.0.1), selected through the env var."""
    root = tmp_path / "src" / "transformers"
    model = root / "models" / "toyx"
    model.mkdir(parents=True)
    (root / "__init__.py").write_text('__version__ = "0.0.1"\n')
    (root / "models" / "__init__.py").write_text("")
    (model / "__init__.py").write_text("")
    (model / "configuration_toyx.py").write_text(
        textwrap.dedent(
            """
            class ToyxConfig:
                model_type = "toyx"
            """
        )
    )
    (model / "modeling_toyx.py").write_text(
        textwrap.dedent(
            """
            import torch
            from torch import nn


            class ToyxRMSNorm(nn.Module):
                def __init__(self, hidden_size):
                    super().__init__()
                    self.weight = nn.Parameter(torch.zeros(hidden_size))
            """
        )
    )
    monkeypatch.setenv("NPU_LINT_TRANSFORMERS_SRC", str(root))
    return root


def test_core_resolver(fake_src: Path) -> None:
    assert astutil.transformers_dir() == fake_src
    assert astutil.transformers_version() == "0.0.1"


def test_core_resolver_not_a_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NPU_LINT_TRANSFORMERS_SRC", str(tmp_path / "missing"))
    assert astutil.transformers_dir() is None
    assert upstream.transformers_root() is None
    assert astutil.transformers_version() is None


def test_codemod_reader(
    fake_src: Path,
) -> None:  # fixers.dispatch: transformers_root / module_path / class_init
    assert upstream.transformers_root() == str(fake_src)
    assert upstream.module_path(MODULE) == str(fake_src / "models" / "toyx" / "modeling_toyx.py")
    assert upstream.class_init(MODULE, "ToyxRMSNorm") is not None


def test_semantics_reader(fake_src: Path) -> None:  # NPU4xx / NPU7xx: upstream_path, upstream_zero_init
    assert upstream.upstream_path(MODULE) == fake_src / "models" / "toyx" / "modeling_toyx.py"
    assert upstream.upstream_zero_init(MODULE, "ToyxRMSNorm") is True
    assert upstream.upstream_class(MODULE, "ToyxRMSNorm") is not None


def test_packaging_reader(fake_src: Path) -> None:  # NPU503/NPU732: config model_type, NPU506's version
    assert vlmtypes._model_type(MODULE, "ToyxConfig") == "toyx"
    assert packaging._installed_transformers() == "0.0.1"


def test_cli_note_follows_env(tmp_path: Path) -> None:
    target = tmp_path / "train.py"
    target.write_text("x = 1\n")
    env = {"NPU_LINT_TRANSFORMERS_SRC": str(tmp_path / "missing"), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, "-m", "npu_lint", "check", "--no-cache", "--select", "NPU4", str(target)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert "no transformers source found" in proc.stderr
