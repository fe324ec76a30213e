"""NPU221, round 22: an NPU registry row of one variant (partial, vision, a model's own variant) that resolves to
the implementation the tree writes for another variant or op. Read from the tree: a variant's package
(`rope/full/npu.py`), the callable's name (`partial_...`, `..._vision_...`), a sibling the module defines for the
row's variant; and two rows of different variants sharing one callable however many rows bind it before them.
Own ops and names in every generation (OpSlot KernelSpec factories, VeomniOp `register_op`, VeomniKernel
`register_kernel`, ops-config `BackendSpec` tables); trees built in tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni.project import load_project
from npu_lint.veomni.rowvariants import misbound
from tests.rules.snippets import write_file as _write


def _lint(root: Path, path: Path) -> list:
    project = load_project([str(root)])
    return lint_source(
        SourceFile.from_text(str(path), path.read_text()), ["NPU221"], Settings(), project=project
    )


_KERNELS = """
def spin_npu(x, table):
    return x


def band_spin_npu(x, table, band):
    return x


def spin_spatial_npu(x, table):
    return x
"""

# OpSlot generation: a backend table row first, then factories (the row the table binds hid later clashes)
_OPSLOT = """
from ...config.registry import BackendSpec, OpScope, OpSpec, register_op
from ...kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec

register_op(OpSpec(name="spin", config_field="spin_implementation", label="Spin", scope=OpScope.PER_MODEL,
                   default="eager", backends={{"npu": BackendSpec(entry="veomni.ops.kernels.spin.npu:spin_npu")}}))


def _npu_whole():
    from .npu import spin_npu

    return spin_npu


def _npu_band():
    from .npu import {band}

    return {band}


def _npu_spatial():
    from .npu import {spatial}

    return {spatial}


KERNEL_REGISTRY.register(KernelSpec(name="npu", op_name="spin", variant="whole", factory=_npu_whole,
                                    hardware=HardwareRequirement(device_type="npu")))
KERNEL_REGISTRY.register(KernelSpec(name="npu", op_name="spin", variant="band", factory=_npu_band,
                                    hardware=HardwareRequirement(device_type="npu")))
KERNEL_REGISTRY.register(KernelSpec(name="npu", op_name="spin_spatial", variant="whole", factory=_npu_spatial,
                                    hardware=HardwareRequirement(device_type="npu")))
"""


@pytest.mark.parametrize(
    ("band", "spatial", "expected"),
    [
        ("band_spin_npu", "spin_spatial_npu", 0),
        ("spin_npu", "spin_spatial_npu", 1),  # the band row binds the whole-head kernel (after a backend row)
        ("spin_npu", "spin_npu", 2),  # both the band row and the spatial op's row
        ("band_spin_npu", "spin_npu", 1),
    ],
)
def test_opslot_rows_after_a_backend_row(tmp_path: Path, band: str, spatial: str, expected: int) -> None:
    _write(tmp_path, "veomni/ops/kernels/spin/npu.py", _KERNELS)
    path = _write(tmp_path, "veomni/ops/kernels/spin/__init__.py", _OPSLOT.format(band=band, spatial=spatial))
    diags = _lint(tmp_path, path)
    assert len(diags) == expected, [d.message for d in diags]


_ONE_ROW = """
from ...kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec


def _npu_factory():
    from .ascend import {name}

    return {name}


KERNEL_REGISTRY.register(KernelSpec(name="npu", op_name="{op}", variant="{variant}", factory=_npu_factory,
                                    hardware=HardwareRequirement(device_type="npu")))
"""


@pytest.mark.parametrize(
    ("op", "variant", "name", "expected"),
    [
        ("spin", "band", "spin_npu", 1),  # the module keeps `band_spin_npu` for this variant
        ("spin", "band", "band_spin_npu", 0),
        ("spin_spatial", "whole", "spin_npu", 1),  # the module keeps `spin_spatial_npu` for this op
        ("spin_spatial", "whole", "spin_spatial_npu", 0),
        ("spin", "whole", "spin_npu", 0),  # the generic kernel for the generic variant
    ],
)
def test_one_row_and_the_module_sibling_named_for_it(
    tmp_path: Path, op: str, variant: str, name: str, expected: int
) -> None:
    _write(tmp_path, "veomni/ops/kernels/spin/ascend.py", _KERNELS)
    text = _ONE_ROW.format(op=op, variant=variant, name=name)
    path = _write(tmp_path, "veomni/ops/kernels/spin/__init__.py", text)
    diags = _lint(tmp_path, path)
    assert len(diags) == expected, [d.message for d in diags]


_PACKAGES = """
from ...registry import {register}
from ...requirement import NpuKernelRequirement
from .banded import eager as banded_eager
from .banded import npu as banded_npu
from .plain import eager as plain_eager
from .plain import npu as plain_npu

{register}("twist", "plain", "eager", plain_eager.forward, plain_eager.backward)
{register}("twist", "plain", "npu", plain_npu.forward, plain_npu.backward, requirement=NpuKernelRequirement())
{register}("twist", "banded", "eager", banded_eager.forward, banded_eager.backward)
{register}("twist", "banded", "npu", {forward}, {backward}, requirement=NpuKernelRequirement())
"""


@pytest.mark.parametrize("register", ["register_op", "register_kernel"])
@pytest.mark.parametrize(
    ("forward", "backward", "expected"),
    [
        ("banded_npu.forward", "banded_npu.backward", 0),
        ("plain_npu.forward", "banded_npu.backward", 1),  # shares the plain NPU row's forward
        ("banded_npu.forward", "plain_eager.backward", 1),  # the plain variant's eager backward
        ("banded_npu.forward", "banded_eager.backward", 0),  # its own variant's eager backward
    ],
)
def test_variant_packages(tmp_path: Path, register: str, forward: str, backward: str, expected: int) -> None:
    for variant in ("plain", "banded"):
        for impl in ("eager", "npu"):
            _write(
                tmp_path,
                f"veomni/kernels/_kernels/twist/{variant}/{impl}.py",
                "def forward(x):\n    return x\n",
            )
    text = _PACKAGES.format(register=register, forward=forward, backward=backward)
    path = _write(tmp_path, "veomni/kernels/_kernels/twist/__init__.py", text)
    diags = _lint(tmp_path, path)
    assert len(diags) == expected, [d.message for d in diags]


def test_npu_row_of_an_only_npu_variant_bound_to_another_package(tmp_path: Path) -> None:
    """No other NPU row binds the callable: the package it lives in says which variant it is."""
    for variant in ("dense", "gated"):
        _write(tmp_path, f"veomni/ops/kernels/mixer/{variant}/npu.py", "def forward(x):\n    return x\n")
    text = """
    from ...registry import register_op
    from ...requirement import NpuKernelRequirement
    from .dense import npu as dense_npu

    register_op("mixer", "dense", "eager", None)
    register_op("mixer", "gated", "npu", dense_npu.forward, requirement=NpuKernelRequirement())
    """
    path = _write(tmp_path, "veomni/ops/kernels/mixer/__init__.py", text)
    diags = _lint(tmp_path, path)
    assert len(diags) == 1 and "mixer/gated" in diags[0].message, [d.message for d in diags]


@pytest.mark.parametrize(
    ("functions", "expected"),
    [
        (("whole_spin_npu", "band_spin_npu"), "band"),
        # nothing is named for `whole`: the band kernel serving the whole row is the tree's choice
        (("spin_npu", "band_spin_npu"), None),
    ],
)
def test_name_spelling_another_variant(functions: tuple[str, ...], expected: str | None) -> None:
    found = misbound(
        "veomni.ops.kernels.spin",
        "spin",
        "whole",
        "veomni.ops.kernels.spin.npu",
        "band_spin_npu",
        frozenset({"whole", "band"}),
        frozenset({"spin"}),
        functions,
    )
    assert (found.what if found is not None else None) == expected


def test_another_variants_package_reused_when_the_tree_has_none_of_its_own(tmp_path: Path) -> None:
    """The `gated` variant has no package in the tree: its NPU row reusing the dense package is the tree's
    choice, not a slip."""
    _write(tmp_path, "veomni/ops/kernels/mixer/dense/npu.py", "def forward(x):\n    return x\n")
    text = """
    from ...registry import register_op
    from ...requirement import NpuKernelRequirement
    from .dense import npu as dense_npu

    register_op("mixer", "dense", "eager", None)
    register_op("mixer", "gated", "npu", dense_npu.forward, requirement=NpuKernelRequirement())
    """
    path = _write(tmp_path, "veomni/ops/kernels/mixer/__init__.py", text)
    assert _lint(tmp_path, path) == []


def test_generic_names_stay_quiet() -> None:
    """`forward` says nothing; a helper beside it does not make it another variant's."""
    assert (
        misbound(
            "veomni.ops.kernels.spin",
            "spin",
            "band",
            "veomni.ops.kernels.spin.band.npu",
            "forward",
            frozenset({"whole", "band"}),
            frozenset({"spin"}),
            ("forward", "backward", "band_helper"),
        )
        is None
    )
