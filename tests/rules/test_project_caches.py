"""What rules derive from the whole tree (NPU323's import requirements and closures, the operators the tree
defines, NPU308's on-demand imports, NPU234's top-level imports) is kept by the project (``Project.remember``), not
by the file listing: a file edited between two runs in one process (the language server, a test session) gives the
new answer. Each test lints, edits a file the answer depends on, loads the project again and lints again."""

from __future__ import annotations

from pathlib import Path

from tests.rules.snippets import lint_in_tree, ops_tree, write_file

# the tree declares that importing `veomni.distributed.moe.dispatcher` imports `deep_ep_npu`
_INIT = """
def build_dispatcher():
    try:
        from .dispatcher import DeepEPDispatcher
    except ModuleNotFoundError as exc:
        if exc.name == "deep_ep_npu":
            raise RuntimeError("install deep_ep_npu") from exc
        raise
    return DeepEPDispatcher()
"""

_INIT_NO_HANDLER = """
def build_dispatcher():
    from .dispatcher import DeepEPDispatcher

    return DeepEPDispatcher()
"""

_KERNEL = """
import torch
import torch_npu


def npu_dispatch(x, topk_idx):
    return torch.ops.deep_ep.npu_dispatch(x, topk_idx)
"""


def _tree(tmp_path: Path, dispatcher: str, init: str = _INIT) -> Path:
    return ops_tree(
        tmp_path,
        {
            "veomni/distributed/__init__.py": "",
            "veomni/distributed/moe/__init__.py": init,
            "veomni/distributed/moe/dispatcher.py": dispatcher,
            "veomni/distributed/moe/kernel.py": _KERNEL,
        },
    )


def _lines(root: Path, rel: str, code: str) -> list[int]:
    return sorted(d.line for d in lint_in_tree(root, rel, [code]) if d.code == code)


def test_npu323_closure_follows_an_edited_module(tmp_path: Path) -> None:
    # the dispatcher imports the kernel module: the kernel is in the guarded import's closure
    root = _tree(tmp_path, "from .kernel import npu_dispatch\n\n\nclass DeepEPDispatcher:\n    pass\n")
    assert _lines(root, "veomni/distributed/moe/kernel.py", "NPU323") == [2]
    # the dispatcher no longer imports it: the kernel is outside the closure (same file listing)
    write_file(root, "veomni/distributed/moe/dispatcher.py", "class DeepEPDispatcher:\n    pass\n")
    assert _lines(root, "veomni/distributed/moe/kernel.py", "NPU323") == []


def test_npu323_requirements_follow_an_edited_handler(tmp_path: Path) -> None:
    root = _tree(tmp_path, "from .kernel import npu_dispatch\n\n\nclass DeepEPDispatcher:\n    pass\n")
    assert _lines(root, "veomni/distributed/moe/kernel.py", "NPU323") == [2]
    # the handler that declared the requirement is gone (same file listing)
    write_file(root, "veomni/distributed/moe/__init__.py", _INIT_NO_HANDLER)
    assert _lines(root, "veomni/distributed/moe/kernel.py", "NPU323") == []
    # and back
    write_file(root, "veomni/distributed/moe/__init__.py", _INIT)
    assert _lines(root, "veomni/distributed/moe/kernel.py", "NPU323") == [2]


_DEFINER = """
import torch


@torch.library.custom_op("veomni_dsa::{op}", mutates_args=())
def indexer(x: torch.Tensor) -> torch.Tensor:
    return x
"""

_CALLER = """
import torch


def forward(x):
    return torch.ops.veomni_dsa.lightning_indexer(x)
"""


def test_npu320_definitions_follow_an_edited_definer(tmp_path: Path) -> None:
    root = ops_tree(
        tmp_path,
        {
            "veomni/ops/kernels/dsa/__init__.py": "",
            "veomni/ops/kernels/dsa/_ops.py": _DEFINER.format(op="lightning_indexer"),
            "veomni/ops/kernels/dsa/caller.py": _CALLER,
        },
    )
    assert _lines(root, "veomni/ops/kernels/dsa/caller.py", "NPU320") == [5]
    # the tree no longer defines the operator (same file listing): not the rule's business any more
    write_file(root, "veomni/ops/kernels/dsa/_ops.py", _DEFINER.format(op="other_indexer_op"))
    assert _lines(root, "veomni/ops/kernels/dsa/caller.py", "NPU320") == []


def test_directory_backend_follows_an_edited_module(tmp_path: Path) -> None:
    from npu_lint.veomni import backends

    package = tmp_path / "moe"
    package.mkdir()
    (package / "fast.py").write_text("import triton\n")
    (package / "helpers.py").write_text("import torch\n")
    assert backends.directory_backend(str(package)) == backends.CUDA
    (package / "adapter.py").write_text("import torch_npu\n")  # a new module: mixed
    assert backends.directory_backend(str(package)) == backends.ANY
    (package / "adapter.py").write_text("import torch  # neutral now\n")  # edited: CUDA again
    assert backends.directory_backend(str(package)) == backends.CUDA


def test_tree_constants_follow_an_edited_module(tmp_path: Path) -> None:
    from npu_lint.veomni.constants import tree_constant, tree_ignore_index

    constants = tmp_path / "veomni" / "utils" / "constants.py"
    constants.parent.mkdir(parents=True)
    constants.write_text("IGNORE_INDEX = -100\n")
    assert tree_ignore_index(str(tmp_path)) == -100
    constants.write_text("IGNORE_INDEX = -1000\nIMAGE_INPUT_INDEX = 7\n")
    assert tree_ignore_index(str(tmp_path)) == -1000
    assert tree_constant(str(tmp_path), "IMAGE_INPUT_INDEX") == 7


def test_ruff_style_follows_an_edited_configuration(tmp_path: Path) -> None:
    from npu_lint.core.imports import ruff_style

    (tmp_path / "pyproject.toml").write_text("[tool.ruff]\nline-length = 100\n")
    package = tmp_path / "pkg"
    package.mkdir()
    assert ruff_style(str(package)).line_length == 100
    (tmp_path / "pyproject.toml").write_text("[tool.ruff]\nline-length = 120\n")
    assert ruff_style(str(package)).line_length == 120
    (package / "ruff.toml").write_text("line-length = 79\n")  # a nearer one appears
    assert ruff_style(str(package)).line_length == 79


_FAMILY = 'from ...registry import register_op\n\nregister_op("rms_norm", "standard", "npu", wrapper=None)\n'


def test_npu234_top_level_imports_follow_an_edited_module(tmp_path: Path) -> None:
    root = ops_tree(
        tmp_path,
        {
            "veomni/ops/__init__.py": "from .kernels import rms_norm  # noqa: F401\n",
            "veomni/ops/registry.py": "def register_op(*args, **kwargs):\n    pass\n",
            "veomni/ops/kernels/rms_norm/__init__.py": _FAMILY,
        },
    )
    assert _lines(root, "veomni/ops/kernels/__init__.py", "NPU234") == []
    # the one module-level import of the family is gone: its rows are never registered
    write_file(
        root, "veomni/ops/__init__.py", "def load():\n    from .kernels import rms_norm  # noqa: F401\n"
    )
    assert _lines(root, "veomni/ops/kernels/__init__.py", "NPU234") == [1]
