"""What rules derive from the whole tree is kept in the project's memo: read once per project, gone with it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from npu_lint.veomni import npucalls, vlmtypes
from npu_lint.veomni.optional import Site
from npu_lint.veomni.project import Project
from tests.rules.snippets import write_file

_REGISTERS = """
from ...loader import MODELING_REGISTRY


@MODELING_REGISTRY.register("{key}")
def register(architecture):
    return None
"""


def _counting(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> list[object]:
    calls: list[object] = []
    real = getattr(module, name)

    def wrapper(*args: object) -> object:
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(module, name, wrapper)
    return calls


def test_sibling_registrations_read_once_per_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    models = "veomni/models/transformers"
    for name in ("alpha", "beta", "gamma"):
        write_file(tmp_path, f"{models}/{name}/__init__.py", _REGISTERS.format(key=f"{name}_text"))
    calls = _counting(monkeypatch, vlmtypes, "_package_keys")
    project = Project(root=str(tmp_path))
    alpha, beta = (str(tmp_path / models / n / "__init__.py") for n in ("alpha", "beta"))
    assert vlmtypes.sibling_modeling_types(alpha, project) == {"beta_text", "gamma_text"}
    assert vlmtypes.sibling_modeling_types(beta, project) == {"alpha_text", "gamma_text"}
    assert len(calls) == 1  # one read of the directory for both packages
    assert vlmtypes.sibling_modeling_types(alpha, Project(root=str(tmp_path))) == {"beta_text", "gamma_text"}
    assert len(calls) == 2  # a new project reads again: the memo died with the old one


def test_kernel_calls_memoised_per_project_and_file_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kernel = write_file(
        tmp_path,
        "veomni/ops/npu_rms.py",
        """
        import torch_npu


        def rms(x, w, eps):
            return torch_npu.npu_rms_norm(x, w, epsilon=eps)[0]
        """,
    )
    calls = _counting(monkeypatch, npucalls, "_tree_calls")
    project = Project(
        root=str(tmp_path), import_sites={"torch_npu": (Site("veomni/ops/npu_rms.py", 1, "top"),)}
    )
    first = npucalls.tree_calls(project)
    assert set(first) == {"npu_rms_norm"} and first["npu_rms_norm"][0].result == npucalls.INDEXED
    assert npucalls.tree_calls(project) is first and len(calls) == 1
    st = kernel.stat()
    os.utime(kernel, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    npucalls.tree_calls(project)
    assert len(calls) == 2  # the file changed: read again
