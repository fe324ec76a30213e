"""NPU320: an operator the tree defines, called through ``torch.ops`` by a module whose imports never load the
defining module, in regions other than the dev case (the Ascend gated-delta-rule kernels); operators the tree
does not define are not the rule's business (no built-in catalog)."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni.project import load_project


def _lines(tmp_path, files: dict[str, str], target: str) -> list[int]:  # noqa: ANN001
    files = {
        "pyproject.toml": "[project]\nname = 'veomni'\n",
        "veomni/__init__.py": "",
        "veomni/ops/__init__.py": "",
        **files,
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(textwrap.dedent(text).lstrip("\n"))
    path = tmp_path / target
    project = load_project([str(tmp_path)])
    diags = lint_source(SourceFile.from_text(str(path), path.read_text()), ["NPU320"], Settings(), project)
    return sorted(d.line for d in diags if d.code == "NPU320")


_CUSTOM = """
import torch


@torch.library.custom_op("{ns}::{op}", mutates_args=())
def {op}(x: torch.Tensor) -> torch.Tensor:
    return x
"""

_LIBRARY = """
import torch

_lib = torch.library.Library("{ns}", "DEF")
_lib.define("{op}(Tensor x) -> Tensor")
_lib.impl("{op}", lambda x: x, "CompositeExplicitAutograd")
"""

_DEFINE = """
import torch

torch.library.define("{ns}::{op}", "(Tensor x) -> Tensor")
"""


def test_tree_op_in_generated_model_file(tmp_path) -> None:  # noqa: ANN001
    files = {
        "veomni/ops/kernels/dsa/_ops.py": _CUSTOM.format(ns="veomni_dsa", op="lightning_indexer"),
        "veomni/models/transformers/dsv32/generated/patched_modeling_dsv32_npu.py": """
        import torch


        def indexer(q, k, weights):
            scores = torch.ops.veomni_dsa.lightning_indexer(q)
            return scores
        """,
    }
    assert _lines(
        tmp_path, files, "veomni/models/transformers/dsv32/generated/patched_modeling_dsv32_npu.py"
    ) == [5]


def test_library_defined_namespace_in_distributed_code(tmp_path) -> None:  # noqa: ANN001
    files = {
        "veomni/distributed/moe/_C.py": _LIBRARY.format(ns="veomni_ext", op="fused_permute"),
        "veomni/distributed/moe/fused_permute.py": """
        import torch


        def fused_permute(tokens, indices):
            out = torch.ops.veomni_ext.fused_permute(tokens)
            return torch.ops.veomni_ext.fused_permute(out)
        """,
    }
    assert _lines(tmp_path, files, "veomni/distributed/moe/fused_permute.py") == [5]


def test_define_in_a_loss_kernel(tmp_path) -> None:  # noqa: ANN001
    files = {
        "veomni/ops/kernels/cross_entropy/_defs.py": _DEFINE.format(ns="veomni_ce", op="fused_ce"),
        "veomni/ops/kernels/cross_entropy/fused_ce.py": """
        import torch


        def fused_ce(logits, labels):
            return torch.ops.veomni_ce.fused_ce(logits)
        """,
    }
    assert _lines(tmp_path, files, "veomni/ops/kernels/cross_entropy/fused_ce.py") == [5]


def test_loaded_definitions_and_foreign_operators_stay_quiet(tmp_path) -> None:  # noqa: ANN001
    defs = {"veomni/distributed/moe/_C.py": _LIBRARY.format(ns="veomni_ext", op="fused_permute")}
    call = "import torch\n{imp}\n\ndef f(t):\n    {lazy}return torch.ops.veomni_ext.fused_permute(t)\n"
    target = "veomni/distributed/moe/fused_permute.py"
    kept = {**defs, target: call.format(imp="from . import _C  # noqa: F401\n", lazy="")}
    assert _lines(tmp_path / "a", kept, target) == []
    lazy = {**defs, target: call.format(imp="", lazy="from . import _C  # noqa: F401\n    ")}
    assert _lines(tmp_path / "b", lazy, target) == []
    # the package __init__ loads the definitions before any of its modules runs
    init = {
        **defs,
        "veomni/distributed/moe/__init__.py": "from . import _C\n",
        target: call.format(imp="", lazy=""),
    }
    assert _lines(tmp_path / "c", init, target) == []
    # two hops: the module imports a helper that imports the definitions
    hop = {
        **defs,
        "veomni/distributed/moe/helpers.py": "from . import _C  # noqa: F401\n",
        target: call.format(imp="from .helpers import *  # noqa: F403\n", lazy=""),
    }
    assert _lines(tmp_path / "d", hop, target) == []
    foreign = {
        target: "import torch\n\n\ndef f(x):\n    return torch.ops.npu.npu_mrope(x), torch.ops.fla.chunk(x)\n"
    }
    assert _lines(tmp_path / "e", foreign, target) == []
