"""Round 10 of the resolution model (npu_lint/veomni/resolution.py): rows registered in loops over literals,
every callable a row binds (a raw forward/backward pair, the kernel handed to a factory's adapter), GPU rows
declared hardware-agnostic (NPU224), slot declarations inside post-import blocks and the NPU host's reading of an
``npu_as`` remap (NPU205). Own ops and names; trees built in tmp_path."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni.project import load_project
from npu_lint.veomni.resolution import file_bindings, names_gpu, npu_selection
from tests.rules.snippets import write_file


def _lint(root: Path, path: Path, code: str) -> list:
    project = load_project([str(root)])
    return lint_source(SourceFile.from_text(str(path), path.read_text()), [code], Settings(), project=project)


_LOOP_ROWS = """
from ...kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec


def _plain_factory():
    from .plain import plain_mix

    return plain_mix


def _fast_factory():
    from .triton_mix import fast_mix

    return fast_mix


for _name, _factory, _hw in (
    ("plain", _plain_factory, HardwareRequirement(device_type="any")),
    ("fast", _fast_factory, HardwareRequirement(device_type="{fast_hw}")),
):
    KERNEL_REGISTRY.register(
        KernelSpec(
            name=_name,
            op_name="mix",
            variant="base",
            factory=_factory,
            hardware=_hw,
        )
    )
"""


def test_rows_registered_in_a_loop_are_read_per_iteration() -> None:
    tree = ast.parse(_LOOP_ROWS.format(fast_hw="gpu"))
    rows = file_bindings(tree, "veomni.ops.kernels.mix", True)
    assert [(r.impl, r.device, r.target.dotted if r.target else None) for r in rows] == [
        ("plain", "any", "veomni.ops.kernels.mix.plain:plain_mix"),
        ("fast", "gpu", "veomni.ops.kernels.mix.triton_mix:fast_mix"),
    ]


@pytest.mark.parametrize(("fast_hw", "found"), [("gpu", 0), ("any", 1)])
def test_npu224_loop_row_declared_for_any_device(tmp_path: Path, fast_hw: str, found: int) -> None:
    path = write_file(tmp_path, "veomni/ops/kernels/mix/__init__.py", _LOOP_ROWS.format(fast_hw=fast_hw))
    got = _lint(tmp_path, path, "NPU224")
    assert len(got) == found
    if found:
        assert "mix/base/fast" in got[0].message


_RAW_ROWS = """
from ...registry import register_op
from ...requirement import CudaKernelRequirement, NpuKernelRequirement
from .base import ascend as base_ascend
from .base import cuda_graph as base_cuda
from .base import plain as base_plain

register_op("blend", "base", "plain", base_plain.forward, base_plain.backward)
register_op("blend", "base", "cuda", base_cuda.forward, base_cuda.backward, requirement=CudaKernelRequirement())
register_op("blend", "base", "npu", base_ascend.forward, {npu_backward}, requirement=NpuKernelRequirement())
"""


@pytest.mark.parametrize(
    ("npu_backward", "found"),
    [("base_ascend.backward", 0), ("base_plain.backward", 0), ("base_cuda.backward", 1)],
)
def test_npu220_checks_the_backward_of_a_raw_pair(tmp_path: Path, npu_backward: str, found: int) -> None:
    path = write_file(
        tmp_path, "veomni/ops/kernels/blend/__init__.py", _RAW_ROWS.format(npu_backward=npu_backward)
    )
    got = _lint(tmp_path, path, "NPU220")
    assert len(got) == found
    if found:
        assert "backward" in got[0].message


def test_npu224_device_free_row_with_a_gpu_backward(tmp_path: Path) -> None:
    text = _RAW_ROWS.format(npu_backward="base_ascend.backward").replace(
        "base_plain.forward, base_plain.backward)", "base_plain.forward, base_cuda.backward)"
    )
    path = write_file(tmp_path, "veomni/ops/kernels/blend/__init__.py", text)
    got = _lint(tmp_path, path, "NPU224")
    assert len(got) == 1 and "blend/base/plain" in got[0].message


_ADAPTED_ROWS = """
from functools import partial

from ...kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec


def ScoreLoss(logits, labels, score_fn=None):
    return score_fn(logits, labels)


def _gpu_factory():
    from .liger_score import fused_score

    return partial(ScoreLoss, score_fn=fused_score)


def _npu_factory():
    from {npu_module} import {npu_fn}

    return partial(ScoreLoss, score_fn={npu_fn})


KERNEL_REGISTRY.register(KernelSpec(name="liger_kernel", op_name="score", variant="causal",
                                    factory=_gpu_factory, hardware=HardwareRequirement(device_type="gpu")))
for _name, _hw in (("npu", HardwareRequirement(device_type="npu")),):
    KERNEL_REGISTRY.register(KernelSpec(name=_name, op_name="score", variant="causal", factory=_npu_factory,
                                        hardware=_hw))
"""


@pytest.mark.parametrize(
    ("npu_module", "npu_fn", "found"),
    [(".eager_score", "plain_score", 0), (".liger_score", "fused_score", 1)],
)
def test_npu220_adapter_argument_of_a_loop_row(
    tmp_path: Path, npu_module: str, npu_fn: str, found: int
) -> None:
    """The same adapter (``partial(ScoreLoss, ...)``) around another kernel is not the GPU row's kernel; the
    Liger kernel handed to it is."""
    text = _ADAPTED_ROWS.format(npu_module=npu_module, npu_fn=npu_fn)
    path = write_file(tmp_path, "veomni/ops/kernels/score/__init__.py", text)
    assert len(_lint(tmp_path, path, "NPU220")) == found


def test_names_gpu() -> None:
    assert names_gpu("fused_triton") == "triton"
    assert names_gpu("liger_kernel") == "liger"
    assert names_gpu("tilelang") == "tilelang"
    assert names_gpu("npu_triton") is None
    assert names_gpu("chunk_loss") is None
    assert names_gpu("flash_attention_2") is None  # transformers serves it on Ascend


def test_npu224_attention_rows_through_transformers_are_left_alone(tmp_path: Path) -> None:
    """Regression (VeomniOp tree, attention/__init__.py): attention rows forwarding to ALL_ATTENTION_FUNCTIONS
    under names such as flash_attention_2 run on Ascend through transformers' NPU flash attention."""
    text = """
    from ...registry import register_op


    def lookup(impl):
        def wrapper(*args, **kwargs):
            return impl

        return wrapper


    for _impl in ("eager", "sdpa", "flash_attention_2", "veomni_flash_attention_3"):
        register_op("attention", "standard", _impl, wrapper=lookup(_impl))
    """
    path = write_file(tmp_path, "veomni/ops/kernels/attention/__init__.py", text)
    assert _lint(tmp_path, path, "NPU224") == []


_CE_ROWS = """
from ...registry import register_op
from ...requirement import CudaKernelRequirement
from .standard import chunk as ce_chunk
from .standard import eager as ce_eager
from .standard import liger_kernel as ce_liger

register_op("cross_entropy_loss", "standard", "eager", ce_eager.forward, ce_eager.backward)
register_op("cross_entropy_loss", "standard", "liger_kernel", ce_liger.forward, ce_liger.backward,
            requirement=CudaKernelRequirement())
register_op("cross_entropy_loss", "standard", "chunk_loss", ce_chunk.forward, ce_chunk.backward)
"""

_CE_SPEC = """
from veomni.models_kernel.utils.op_utils import resolve_op_impl
from veomni.ops import VeomniOp


def toy_forcausallm_init_patched(self, config):
    impl = resolve_op_impl("cross_entropy_loss_implementation", npu_as={npu_as!r})
    self.veomni_ce = VeomniOp("cross_entropy_loss", "standard", impl)
"""


@pytest.mark.parametrize(
    ("npu_as", "found"), [("chunk_loss", ""), ("liger_kernel", "only runs"), ("npu", "KeyError")]
)
def test_npu205_npu_as_remap_on_an_npu_host(tmp_path: Path, npu_as: str, found: str) -> None:
    write_file(tmp_path, "veomni/ops/__init__.py", "")
    write_file(tmp_path, "veomni/ops/kernels/loss/__init__.py", _CE_ROWS)
    path = write_file(
        tmp_path,
        "veomni/models_kernel/transformers/toy/toy_gpu_patch_gen_config.py",
        _CE_SPEC.format(npu_as=npu_as),
    )
    got = _lint(tmp_path, path, "NPU205")
    if not found:
        assert got == []
    else:
        assert len(got) == 1 and found in got[0].message
        assert got[0].line == 6  # the read, where the remap is written


def test_npu_selection_reads_the_remap() -> None:
    call = (
        ast.parse('resolve_op_impl("cross_entropy_loss_implementation", npu_as="chunk_loss")').body[0].value
    )  # type: ignore[attr-defined]
    sel = npu_selection(call, frozenset({"resolve_op_impl"}))
    assert sel is not None and sel.asked == "chunk_loss" and sel.field_op == "cross_entropy_loss"
    plain = ast.parse('resolve_op_impl("swiglu_mlp_implementation")').body[0].value  # type: ignore[attr-defined]
    got = npu_selection(plain, frozenset({"resolve_op_impl"}))
    assert got is not None and got.asked == "eager"


_SLOT_TREE = """
from ...kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec


def _npu_factory():
    from .npu import score_npu

    return score_npu


KERNEL_REGISTRY.register(KernelSpec(name="npu", op_name="score_loss", variant="causal", factory=_npu_factory,
                                    hardware=HardwareRequirement(device_type="npu")))
"""

_SLOT_SPEC = '''
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.toy.modeling_toy", target_file="patched_modeling_toy_gpu.py")

config.add_post_import_block(
    """
    from veomni.ops.dispatch import OpSlot
    veomni_loss = OpSlot({op!r}, {variant!r})
    """
)
'''


@pytest.mark.parametrize(
    ("op", "variant", "found"),
    [("score_loss", "causal", 0), ("score", "causal", 1), ("score_loss", "causal_lm", 1)],
)
def test_npu205_slots_of_a_post_import_block(tmp_path: Path, op: str, variant: str, found: int) -> None:
    write_file(tmp_path, "veomni/ops/kernels/score_loss/__init__.py", _SLOT_TREE)
    path = write_file(
        tmp_path,
        "veomni/models/transformers/toy/toy_gpu_patch_gen_config.py",
        _SLOT_SPEC.format(op=op, variant=variant),
    )
    got = _lint(tmp_path, path, "NPU205")
    assert len(got) == found
    if found:
        assert got[0].line == 8  # the slot's own line inside the block


def test_npu224_hardware_bound_to_a_module_constant(tmp_path: Path) -> None:
    """Regression (round 9 control): the GPU requirement built once as a module constant and passed by name."""
    text = (
        _LOOP_ROWS.format(fast_hw="gpu")
        .replace('HardwareRequirement(device_type="gpu")', "_FAST_HARDWARE")
        .replace(
            "def _plain_factory",
            '_FAST_HARDWARE = HardwareRequirement(device_type="gpu")\n\n\ndef _plain_factory',
        )
    )
    path = write_file(tmp_path, "veomni/ops/kernels/mix/__init__.py", text)
    assert "_FAST_HARDWARE)" in path.read_text()
    assert _lint(tmp_path, path, "NPU224") == []
