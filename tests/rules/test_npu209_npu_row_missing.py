"""NPU209: a registry module that gives NPU rows to some variants of an op but not to one the tree's NPU model
code selects. Built trees in tmp_path (both registry generations), own ops and variants."""

from __future__ import annotations

from pathlib import Path

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni.project import load_project
from npu_lint.veomni.registry import read_npu_selections
from tests.rules.snippets import write_file


def _lint(root: Path, path: Path) -> list:
    project = load_project([str(root)])
    return lint_source(
        SourceFile.from_text(str(path), path.read_text()), ["NPU209"], Settings(), project=project
    )


_SLOT_REGISTRY = """
from ...kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec

KERNEL_REGISTRY.register(
    KernelSpec(name="triton", op_name="layer_norm", variant="plain", factory=None,
               hardware=HardwareRequirement(device_type="gpu"))
)
KERNEL_REGISTRY.register(
    KernelSpec(name="npu", op_name="layer_norm", variant="plain", factory=None,
               hardware=HardwareRequirement(device_type="npu"))
)
KERNEL_REGISTRY.register(
    KernelSpec(name="triton", op_name="layer_norm", variant="biasless", factory=None,
               hardware=HardwareRequirement(device_type="gpu"))
)
"""


def test_opslot_tree_variant_without_its_npu_kernelspec(tmp_path: Path) -> None:
    registry = write_file(tmp_path, "veomni/ops/kernels/layer_norm/__init__.py", _SLOT_REGISTRY)
    write_file(
        tmp_path,
        "veomni/models/transformers/toy/toy_npu_patch_gen_config.py",
        '''
        config.add_post_import_block(
            """
            from veomni.ops.dispatch import OpSlot
            veomni_norm = OpSlot("layer_norm", "biasless")
            # veomni_old = OpSlot("layer_norm", "legacy")
            """
        )
        ''',
    )
    diags = _lint(tmp_path, registry)
    assert [d.line for d in diags] == [12]  # the last row of layer_norm/biasless (its KernelSpec)
    assert "`layer_norm/biasless` (its rows: triton (gpu))" in diags[0].message
    assert "NPU rows for `plain`" in diags[0].message
    assert "toy_npu_patch_gen_config.py:4" in diags[0].message


def test_register_op_tree_rows_in_a_loop_and_eager_selections(tmp_path: Path) -> None:
    registry = write_file(
        tmp_path,
        "veomni/ops/kernels/gelu/__init__.py",
        """
        from ...registry import register_op
        from ...requirement import NpuKernelRequirement

        for _variant in ("tanh", "exact"):
            register_op("gelu", _variant, "eager", None)
        register_op("gelu", "tanh", "npu", None, requirement=NpuKernelRequirement())
        """,
    )
    model = "veomni/models_kernel/transformers/toy/generated/patched_modeling_toy_npu.py"
    write_file(tmp_path, model, 'self.act = VeomniOp("gelu", "exact", "eager")\n')
    assert _lint(tmp_path, registry) == []  # the eager row, spelled out: no NPU row needed
    write_file(
        tmp_path, model, 'self.act = VeomniOp("gelu", "exact", resolve_op_impl("gelu_implementation"))\n'
    )
    diags = _lint(tmp_path, registry)
    assert [d.line for d in diags] == [5]  # the loop's row of gelu/exact
    assert "no NPU register_op row for `gelu/exact` (its rows: eager (any))" in diags[0].message


def test_quiet_when_the_op_has_no_npu_kernel_at_all(tmp_path: Path) -> None:
    registry = write_file(
        tmp_path,
        "veomni/ops/kernels/gelu/__init__.py",
        """
        from ...registry import register_op
        from ...requirement import CudaKernelRequirement

        register_op("gelu", "exact", "eager", None)
        register_op("gelu", "exact", "triton", None, requirement=CudaKernelRequirement())
        """,
    )
    model = "veomni/models_kernel/transformers/toy/generated/patched_modeling_toy_npu.py"
    write_file(
        tmp_path, model, 'self.act = VeomniOp("gelu", "exact", resolve_op_impl("gelu_implementation"))\n'
    )
    assert _lint(tmp_path, registry) == []


def test_selections_come_from_npu_files_only(tmp_path: Path) -> None:
    pkg = tmp_path / "veomni/models/transformers/toy"
    write_file(tmp_path, "veomni/models/transformers/toy/toy_gpu_patch_gen_config.py", 'OpSlot("a", "b")\n')
    write_file(tmp_path, "veomni/models/transformers/toy/toy_npu_patch_gen_config.py", 'OpSlot("c", "d")\n')
    assert read_npu_selections((str(pkg),), tmp_path) == (
        ("c", "d", "veomni/models/transformers/toy/toy_npu_patch_gen_config.py:1"),
    )


def test_the_npu_row_registered_under_a_variant_nobody_selects_is_pointed_at(tmp_path: Path) -> None:
    registry = write_file(
        tmp_path,
        "veomni/ops/kernels/gelu/__init__.py",
        """
        from ...registry import register_op
        from ...requirement import NpuKernelRequirement

        register_op("gelu", "tanh", "npu", None, requirement=NpuKernelRequirement())
        register_op(
            "gelu",
            "erf",
            "npu",
            None,
            requirement=NpuKernelRequirement(),
        )
        """,
    )
    model = "veomni/models_kernel/transformers/toy/generated/patched_modeling_toy_npu.py"
    write_file(
        tmp_path,
        model,
        'self.a = VeomniOp("gelu", "tanh", impl)\nself.b = VeomniOp("gelu", "exact", resolve_op_impl("gelu_implementation"))\n',
    )
    diags = _lint(tmp_path, registry)
    assert [(d.line, d.col) for d in diags] == [(7, 4)]  # the `"erf"` of the stray row, not its siblings
    assert "registered as `gelu/erf`, which no NPU-targeted code of this tree selects" in diags[0].message
