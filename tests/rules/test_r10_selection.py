"""Round 10, dispatch: code an NPU host runs choosing a GPU-only implementation itself instead of consuming the
ops config's NPU-normalised value (NPU225): a literal handed to an implementation parameter (keyword, or
positional through the callee's signature), a GPU fallback of an implementation-field read, a GPU name stored into
an implementation field, and a registry default looked up in place of the configured value."""

from __future__ import annotations

import textwrap

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source


def _lint(text: str, path: str = "veomni/ops/toy_apply.py") -> list:
    return lint_source(SourceFile.from_text(path, textwrap.dedent(text).lstrip()), ["NPU225"], Settings())


@pytest.mark.parametrize(
    ("call", "found"),
    [
        ('install_mapping("liger_kernel")', 1),  # positional, through the local signature
        ('install_mapping(impl="fused_triton")', 1),
        ("install_mapping(ops_config.cross_entropy_loss_implementation)", 0),
        ('install_mapping("chunk_loss")', 0),  # device-agnostic
        ('install_mapping("npu")', 0),
        ('register_op("loss", "standard", "liger_kernel", None)', 0),  # a declaration, not a selection
        ('conv(x, backend="triton")', 0),  # a kernel's own option
    ],
)
def test_npu225_literal_to_an_implementation_parameter(call: str, found: int) -> None:
    text = f"""
    def install_mapping(impl="eager"):
        return impl


    def register_op(op, variant, impl, forward):
        return op


    def conv(x, backend=None):
        return x


    def apply(ops_config):
        {call}
    """
    assert len(_lint(text)) == found


@pytest.mark.parametrize(
    ("guard", "found"),
    [
        ("if True:", 1),
        ("if not is_torch_npu_available():", 0),
        ("if IS_CUDA_AVAILABLE:", 0),
        ("if IS_NPU_AVAILABLE:", 1),
    ],
)
def test_npu225_branches_an_npu_host_never_takes(guard: str, found: int) -> None:
    text = f"""
    from veomni.utils.device import IS_CUDA_AVAILABLE, IS_NPU_AVAILABLE
    from veomni.utils.import_utils import is_torch_npu_available


    def bind(slot, ops_config):
        {guard}
            name = getattr(ops_config, f"{{slot.op_name}}_implementation", "liger_kernel")
            slot.bind(name)
    """
    assert len(_lint(text, "veomni/models/auto.py")) == found


@pytest.mark.parametrize(
    ("resolved", "found"),
    [
        ('"fused_quack"', 1),
        ('"fused_npu" if is_torch_npu_available() else "fused_quack"', 0),
        ('"fused_quack" if IS_CUDA_AVAILABLE else "fused_npu"', 0),
        ('"fused_quack" if is_torch_npu_available() else "fused_npu"', 1),
    ],
)
def test_npu225_gpu_name_stored_into_a_field(resolved: str, found: int) -> None:
    text = f"""
    from veomni.utils.device import IS_CUDA_AVAILABLE
    from veomni.utils.import_utils import is_torch_npu_available


    class OpsConfig:
        def normalise(self):
            if self.moe_implementation == "fused":
                resolved = {resolved}
                self.moe_implementation = resolved
    """
    got = _lint(text, "veomni/arguments/toy_arguments.py")
    assert len(got) == found
    if found:
        assert got[0].line == 8  # where the GPU name is chosen


@pytest.mark.parametrize(("value", "found"), [("op.default", 1), ("getattr(ops_config, op.config_field)", 0)])
def test_npu225_registry_default_looked_up(value: str, found: int) -> None:
    text = f"""
    def apply_global_ops(ops_config, ops):
        for op in ops:
            value = {value}
            backend = op.backends.get(value)
            yield backend
    """
    assert len(_lint(text, "veomni/ops/config/registry.py")) == found


def test_npu225_gpu_kernel_modules_are_left_alone() -> None:
    text = """
    def install_mapping(impl="eager"):
        return impl


    def apply():
        install_mapping("liger_kernel")
    """
    assert _lint(text, "veomni/ops/kernels/cross_entropy/liger.py") == []
