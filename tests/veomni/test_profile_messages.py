"""Rule messages and fixes take their VeOmni names from the tree's profile (generation x layout)."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine.fix import fix_source
from npu_lint.engine.lint import lint_source
from npu_lint.veomni.project import load_project

TREES = Path(__file__).resolve().parent.parent / "fixtures" / "trees"


def _lint(tmp_path: Path, fixture: str, rel: str, code: str, codes: list[str], target_api: str = "auto"):
    tree = tmp_path / "tree"
    shutil.copytree(TREES / fixture, tree)
    path = tree / rel
    text = textwrap.dedent(code).lstrip("\n")
    path.write_text(text)
    settings = Settings(root=str(tree), target_api=target_api)
    project = load_project([str(tree)], settings)
    src = SourceFile(str(path), text)
    return lint_source(src, codes, settings, project, fix_mode=True), src, settings, project


OPSLOT_GLOBAL = """
from veomni.ops.dispatch import OpSlot

veomni_rms_norm = OpSlot("rms_norm", "standard")
"""


def test_opslot_tree_under_auto_says_what_the_migration_needs_and_offers_no_fix(tmp_path: Path) -> None:
    diags, *_ = _lint(
        tmp_path, "op_slot_models", "veomni/models/transformers/toy/modeling_x.py", OPSLOT_GLOBAL, ["NPU201"]
    )
    (diag,) = diags
    assert (
        "OpSlot generation" in diag.message and "VeomniOp" in diag.message and "VeomniKernel" in diag.message
    )
    assert diag.fix is None


def test_forced_api_the_tree_lacks_offers_no_fix(tmp_path: Path) -> None:
    diags, *_ = _lint(
        tmp_path,
        "op_slot_models",
        "veomni/models/transformers/toy/modeling_x.py",
        OPSLOT_GLOBAL,
        ["NPU201"],
        target_api="veomni-op",
    )
    (diag,) = diags
    assert "does not define `VeomniOp`" in diag.message and diag.fix is None


def test_veomni_kernel_tree_names_its_own_api(tmp_path: Path) -> None:
    code = """
    from veomni.kernels import VeomniKernel

    veomni_rms_norm = VeomniKernel("rms_norm", "standard")


    class ToyRMSNorm:
        def __init__(self):
            self.veomni_rms_norm = VeomniKernel("rms_norm", "standard", "liger_kernel")
    """
    rel = "veomni/models_kernel/transformers/toy/modeling_x.py"
    diags, src, settings, project = _lint(
        tmp_path, "veomni_kernel_models_kernel", rel, code, ["NPU201", "NPU204"]
    )
    by_code = {d.code: d for d in diags}
    assert "Build a VeomniKernel handle" in by_code["NPU201"].message
    plain = lint_source(src, ["NPU201"], settings, project)  # a plain check: the migration is offered
    assert plain[0].fix is not None and plain[0].fix.deferred
    assert "resolve_kernel_impl" in by_code["NPU204"].message
    fixed = fix_source(src, ["NPU204"], settings, project, unsafe=True).text
    assert "from veomni.models_kernel.utils.kernel_utils import resolve_kernel_impl" in fixed
    assert 'resolve_kernel_impl("rms_norm_implementation")' in fixed


def test_veomni_op_tree_resolver_comes_from_op_utils(tmp_path: Path) -> None:
    code = """
    from veomni.ops import VeomniOp


    class ToyRMSNorm:
        def __init__(self):
            self.veomni_rms_norm = VeomniOp("rms_norm", "standard", "liger_kernel")
    """
    rel = "veomni/models_kernel/transformers/toy/modeling_x.py"
    _, src, settings, project = _lint(tmp_path, "veomni_op_models_kernel", rel, code, ["NPU204"])
    fixed = fix_source(src, ["NPU204"], settings, project, unsafe=True).text
    assert "from veomni.models_kernel.utils.op_utils import resolve_op_impl" in fixed


def test_offset_variant_is_the_trees(tmp_path: Path) -> None:
    code = """
    import torch
    from torch import nn
    from veomni.ops import VeomniOp


    class ToyRMSNorm(nn.Module):
        def __init__(self, dim, eps=1e-6):
            super().__init__()
            self.weight = nn.Parameter(torch.zeros(dim))
            self.eps = eps
            self.veomni_rms_norm = VeomniOp("rms_norm", "qwen3_5", "eager")

        def forward(self, x):
            return self.veomni_rms_norm(x, 1.0 + self.weight, eps=self.eps)
    """
    rel = "veomni/models_kernel/transformers/toy/modeling_x.py"
    diags, *_ = _lint(tmp_path, "veomni_op_models_kernel", rel, code, ["NPU401"])
    assert [d.code for d in diags] == ["NPU401"]  # a double offset through the tree's `qwen3_5` variant


def test_dropped_offset_fix_writes_the_trees_variant(tmp_path: Path) -> None:
    code = """
    import torch
    from torch import nn
    from veomni.ops import VeomniOp


    class ToyRMSNorm(nn.Module):
        def __init__(self, dim, eps=1e-6):
            super().__init__()
            self.weight = nn.Parameter(torch.zeros(dim))
            self.eps = eps
            self.veomni_rms_norm = VeomniOp("rms_norm", "standard", "eager")

        def forward(self, x):
            return self.veomni_rms_norm(x, self.weight, eps=self.eps)
    """
    rel = "veomni/models_kernel/transformers/toy/modeling_x.py"
    diags, src, settings, project = _lint(tmp_path, "veomni_op_models_kernel", rel, code, ["NPU402"])
    assert diags and "`qwen3_5` variant" in diags[0].message
    fixed = fix_source(src, ["NPU402"], settings, project, unsafe=True).text
    assert 'VeomniOp("rms_norm", "qwen3_5", "eager")' in fixed


def test_raw_distributed_api_is_checked_under_models_kernel(tmp_path: Path) -> None:
    code = """
    import torch.distributed as dist


    def world():
        return dist.get_world_size()
    """
    rel = "veomni/models_kernel/transformers/toy/modeling_x.py"
    diags, *_ = _lint(tmp_path, "veomni_op_models_kernel", rel, code, ["NPU602"])
    assert [d.code for d in diags] == ["NPU602"]


def test_framework_helpers_under_models_kernel_utils_are_not_model_code(tmp_path: Path) -> None:
    code = """
    import torch_npu


    def rms(x, w):
        return torch_npu.npu_rms_norm(x, w)[0]
    """
    rel = "veomni/models_kernel/utils/op_utils_npu.py"
    diags, *_ = _lint(tmp_path, "veomni_op_models_kernel", rel, code, ["NPU301", "NPU302"])
    assert diags == []
    rel = "veomni/models_kernel/transformers/toy/modeling_x.py"
    diags, *_ = _lint(tmp_path / "b", "veomni_op_models_kernel", rel, code, ["NPU301", "NPU302"])
    assert {d.code for d in diags} == {"NPU301", "NPU302"}


def test_the_trees_vision_rope_op_reads_the_vision_field(tmp_path: Path) -> None:
    code = """
    from veomni.kernels import VeomniKernel
    from veomni.models_kernel.utils.kernel_utils import resolve_kernel_impl


    def apply_rotary_pos_emb_vision(q, k, cos, sin):
        rope = VeomniKernel("rope_vision", "full", resolve_kernel_impl("rotary_pos_emb_vision_implementation"))
        return rope(q, k, cos, sin)
    """
    rel = "veomni/models_kernel/transformers/toy/modeling_x.py"
    diags, *_ = _lint(tmp_path, "veomni_kernel_models_kernel", rel, code, ["NPU204"])
    assert diags == []
