"""Registry rows read statically for every generation; model packages found in any layout."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

from npu_lint.veomni.catalog import ANY, GPU, MLU, NPU, OpRow
from npu_lint.veomni.layout import find_model_packages, find_veomni_root
from npu_lint.veomni.project import load_project
from npu_lint.veomni.registry import read_registry_tree

TREES = Path(__file__).resolve().parent.parent / "fixtures" / "trees"


def rows(code: str) -> tuple[set[OpRow], set[OpRow]]:
    ops, slots, _ = read_registry_tree(ast.parse(textwrap.dedent(code)))
    return set(ops), set(slots)


def test_loop_over_a_module_constant() -> None:
    ops, _ = rows(
        """
        _IMPLS = ("eager", "sdpa")
        for impl in _IMPLS:
            register_op("attention", "standard", impl, wrapper=f)
        """
    )
    assert ops == {OpRow("attention", "standard", "eager"), OpRow("attention", "standard", "sdpa")}


def test_loop_over_a_literal_list_of_tuples_and_nested_loops() -> None:
    ops, _ = rows(
        """
        for variant, req in [("standard", NpuKernelRequirement()), ("offset", None)]:
            for impl in ("npu", "eager"):
                register_kernel("rms_norm", variant, impl, f, b, requirement=req)
        """
    )
    assert ops == {
        OpRow("rms_norm", "standard", "npu", NPU),
        OpRow("rms_norm", "standard", "eager", NPU),
        OpRow("rms_norm", "offset", "npu", ANY),
        OpRow("rms_norm", "offset", "eager", ANY),
    }


def test_requirements_bound_to_module_names() -> None:
    ops, _ = rows(
        """
        _CUDA = CudaKernelRequirement(min_capability=(8, 0))
        _NPU = reqs.NpuKernelRequirement()
        _MLU: object = MluKernelRequirement()
        _GPU = GpuKernelRequirement(platforms=("cuda",))
        _OP = "rms_norm"
        register_op(_OP, "standard", "liger_kernel", wrapper=f, requirement=_CUDA)
        register_op(_OP, "standard", "npu", wrapper=f, requirement=_NPU)
        register_op(op=_OP, variant="standard", impl="mlu", wrapper=f, requirement=_MLU)
        register_kernel(_OP, "standard", "triton", f, requirement=_GPU)
        register_kernel(_OP, "standard", "eager", f, requirement=_UNKNOWN)
        """
    )
    assert ops == {
        OpRow("rms_norm", "standard", "liger_kernel", GPU),
        OpRow("rms_norm", "standard", "npu", NPU),
        OpRow("rms_norm", "standard", "mlu", MLU),
        OpRow("rms_norm", "standard", "triton", GPU),
        OpRow("rms_norm", "standard", "eager", ANY),
    }


def test_unreadable_calls_are_skipped() -> None:
    ops, _ = rows(
        """
        register_op(OpSpec(name="rms_norm"))  # the 0.1.12 config registry
        register_op("rms_norm", compute(), "eager")
        for impl in discover():
            register_op("attention", "standard", impl)

        def later():
            register_op("x", "y", "z")  # not at import time
        """
    )
    assert ops == set()


def test_kernel_spec_rows_through_constants_and_loops() -> None:
    _, slots = rows(
        """
        _NPU = HardwareRequirement(device_type="npu")
        _VARIANTS = ("standard", "qwen3_5")
        for _variant in _VARIANTS:
            KERNEL_REGISTRY.register(KernelSpec(name="npu", op_name="rms_norm", variant=_variant, hardware=_NPU))
        """
    )
    assert slots == {OpRow("rms_norm", "standard", "npu", NPU), OpRow("rms_norm", "qwen3_5", "npu", NPU)}


def test_rows_of_each_fixture_tree() -> None:
    slot = load_project([str(TREES / "op_slot_models")])
    assert slot.registered == ()
    assert OpRow("rms_norm", "qwen3_5", "npu", NPU) in slot.slot_rows  # loop over a module constant
    assert OpRow("rotary_pos_emb_vision", "full", "npu", NPU) in slot.slot_rows  # loop over tuple pairs

    op = load_project([str(TREES / "veomni_op_models_kernel")])
    assert op.rows == op.registered  # the tree's own registry is authoritative
    assert {r.impl for r in op.rows_for("attention", "standard")} == {"eager", "sdpa", "flash_attention_2"}
    assert OpRow("rms_norm", "qwen3_5", "liger_kernel", GPU) in op.rows  # requirement=_CUDA in a loop
    assert OpRow("rope", "full", "npu", NPU) in op.rows  # op name from a constant, requirement from a tuple
    assert op.has_triple("rope", "partial", "eager")
    assert not op.has_triple("rms_norm", "offset", "eager")
    assert "attention/standard/sdpa" in op.row_sources

    kernel = load_project([str(TREES / "veomni_kernel_models_kernel")])
    assert kernel.rows == kernel.registered
    assert kernel.has_triple("rms_norm", "qwen3_5", "npu")
    assert OpRow("rms_norm", "standard", "liger_kernel", GPU) in kernel.rows
    assert kernel.has_triple("rope_vision", "full", "eager")
    assert "register_kernel" in kernel.rows_origin

    config = load_project([str(TREES / "veomni_op_ops_config")])
    assert OpRow("rms_norm", "standard", "liger_kernel", GPU) in config.rows  # GpuKernelRequirement constant


def test_roots_and_packages_in_every_layout(tmp_path: Path) -> None:
    for tree, layout in (
        ("op_slot_models", "models"),
        ("veomni_op_models_kernel", "models_kernel"),
        ("veomni_kernel_models_kernel", "models_kernel"),
    ):
        package = TREES / tree / "veomni" / layout / "transformers" / "toy"
        assert find_veomni_root(package / "generated" / "patched_modeling_toy_gpu.py") == TREES / tree
        assert load_project([str(package)]).model_packages == (str(package),)
    # by what is there, in any directory: a spec, a generated/ directory, or registration
    (tmp_path / "veomni" / "kernels").mkdir(parents=True)
    for rel, name, text in (
        ("veomni/my_models/a", "a_npu_patch_gen_config.py", "config = None\n"),
        ("veomni/my_models/b/generated", "patched_modeling_b_gpu.py", "x = 1\n"),
        ("veomni/my_models/c", "__init__.py", '@MODELING_REGISTRY.register("c")\ndef f(a):\n    pass\n'),
        ("veomni/my_models/d", "__init__.py", "x = 1\n"),
        ("veomni/my_models/e", "modeling_e.py", "x = 1\n"),
    ):
        (tmp_path / rel).mkdir(parents=True, exist_ok=True)
        (tmp_path / rel / name).write_text(text)
    found = [Path(p).name for p in find_model_packages(tmp_path / "veomni")]
    assert found == ["a", "b", "c"]
    project = load_project([str(tmp_path)])
    assert [Path(p).name for p in project.model_packages] == ["a", "b", "c"]
    assert project.api.layouts == ("veomni/my_models",)
