"""Round 11, dispatch / vendor / device families: optional packages (``veomni.optional``, NPU308), requirement
probes (``veomni.probes``, NPU226), binding names (``veomni.bindnames``, NPU227)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni.optional import GUARDED, LAZY, TOP, import_sites, optional_in_tree
from npu_lint.veomni.project import load_project


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    base = {
        "pyproject.toml": "[project]\nname = 'veomni'\ndependencies = ['einops>=0.8']\n",
        "veomni/__init__.py": "",
        "veomni/ops/__init__.py": "",
        "veomni/ops/kernels/__init__.py": "",
    }
    for rel, text in {**base, **files}.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    return tmp_path


def _lint_file(root: Path, rel: str, codes: list[str]) -> list:
    path = root / rel
    project = load_project([str(path)])
    return lint_source(SourceFile.from_text(str(path), path.read_text()), codes, Settings(), project)


# -- veomni.optional and NPU308 ----------------------------------------------------------------------------

_LAZY_KERNEL = """
import torch


def blend_fast(x):
    from blendkit.ops import blend

    return blend(x)
"""

_REGISTRY = """
{extra}
from ...kernel_registry import KERNEL_REGISTRY, KernelSpec


def _blend_factory():
    from .fast import blend_fast

    return blend_fast
"""


def test_import_sites_kinds() -> None:
    import ast

    tree = ast.parse(
        textwrap.dedent(
            """
            import alpha
            try:
                import beta
            except ImportError:
                beta = None
            if is_gamma_available():
                import gamma
            def f():
                import delta
            """
        )
    )
    kinds = {pkg: how for _stmt, pkg, how in import_sites(tree)}
    assert kinds == {"alpha": TOP, "beta": GUARDED, "gamma": GUARDED, "delta": LAZY}


def test_registry_hoisting_a_lazily_imported_package(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "veomni/ops/kernels/blend/fast.py": _LAZY_KERNEL,
            "veomni/ops/kernels/blend/__init__.py": _REGISTRY.format(extra="import blendkit  # noqa: F401"),
        },
    )
    diags = _lint_file(root, "veomni/ops/kernels/blend/__init__.py", ["NPU308"])
    assert [(d.code, d.line) for d in diags] == [("NPU308", 1)]
    assert "veomni/ops/kernels/blend/fast.py:5" in diags[0].message
    assert optional_in_tree(root, "blendkit", str(root / "veomni/ops/kernels/blend/__init__.py")) is not None


def test_registry_import_of_a_package_loaded_elsewhere_is_quiet(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "veomni/ops/kernels/blend/fast.py": _LAZY_KERNEL,
            "veomni/utils/mix.py": "import blendkit\n",  # another module needs it when it loads
            "veomni/ops/kernels/blend/__init__.py": _REGISTRY.format(extra="import blendkit  # noqa: F401"),
        },
    )
    assert _lint_file(root, "veomni/ops/kernels/blend/__init__.py", ["NPU308"]) == []


def test_registry_import_of_a_required_package_is_quiet(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "veomni/ops/kernels/blend/fast.py": "def f():\n    import einops\n",
            "veomni/ops/kernels/blend/__init__.py": _REGISTRY.format(extra="import einops  # noqa: F401"),
        },
    )
    assert _lint_file(root, "veomni/ops/kernels/blend/__init__.py", ["NPU308"]) == []


def test_guarded_in_file_but_required_by_another_module_is_quiet(tmp_path: Path) -> None:
    guarded = """
    import blendkit

    try:
        from blendkit import NewApi
    except ImportError:
        NewApi = None
    """
    root = _tree(tmp_path, {"veomni/utils/compat.py": guarded, "veomni/utils/other.py": "import blendkit\n"})
    assert _lint_file(root, "veomni/utils/compat.py", ["NPU308"]) == []
    (root / "veomni/utils/other.py").write_text("def f():\n    import blendkit\n")
    diags = _lint_file(root, "veomni/utils/compat.py", ["NPU308"])
    assert [(d.code, d.line) for d in diags] == [("NPU308", 1)]
