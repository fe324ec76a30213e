"""NPU323 reads a module's import closure only as far as the first file that imports the package the handler
names (usually the module itself): the whole closure (every tree module the import loads) is listed only when no
file of it imports the package, where the finding is decided."""

from __future__ import annotations

import pytest

from npu_lint.rules.vendor import npu323_declared_package_import_missing as npu323
from tests.rules.snippets import lint_in_tree, ops_tree
from tests.rules.test_npu323_declared_package_import import _DISPATCH_INIT, _DISPATCH_PRUNED


def _run(tmp_path, files, target, monkeypatch):  # noqa: ANN001, ANN202
    closures: list[str] = []
    real = npu323.import_closure

    def counted(file, root, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        closures.append(file)
        return real(file, root, *args, **kwargs)

    monkeypatch.setattr(npu323, "import_closure", counted)
    found = [
        d.line for d in lint_in_tree(ops_tree(tmp_path, files), target, ["NPU323"]) if d.code == "NPU323"
    ]
    return sorted(found), closures


def test_a_module_importing_the_package_needs_no_closure(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    files = {
        "veomni/distributed/__init__.py": "",
        "veomni/distributed/moe/__init__.py": _DISPATCH_INIT,
        "veomni/distributed/moe/deepep_npu.py": "import deep_ep_npu  # noqa: F401\n" + _DISPATCH_PRUNED,
    }
    assert _run(tmp_path, files, "veomni/distributed/moe/deepep_npu.py", monkeypatch) == ([], [])


def test_the_closure_decides_when_no_file_imports_the_package(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:  # noqa: ANN001
    files = {
        "veomni/distributed/__init__.py": "",
        "veomni/distributed/moe/__init__.py": _DISPATCH_INIT,
        "veomni/distributed/moe/deepep_npu.py": _DISPATCH_PRUNED,
    }
    found, closures = _run(tmp_path, files, "veomni/distributed/moe/deepep_npu.py", monkeypatch)
    assert found == [2]
    assert [c.replace("\\", "/").endswith("moe/deepep_npu.py") for c in closures] == [True]
