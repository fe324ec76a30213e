"""Round-6 dispatch contracts: every NPU implementation name of an op covers each variant NPU code selects
(NPU209, also through a registration loop that skips an alias), an Ascend kernel never shares a CUDA/MLU
kernel's implementation name (NPU213), and the ops config's NPU defaults cover every field whose GPU default the
NPU allow-list rejects (NPU212). Own ops, names and shapes; built trees in tmp_path."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni.project import load_project
from npu_lint.veomni.registry import read_registry_rows
from tests.rules.snippets import write_file


def _lint(root: Path, path: Path, code: str) -> list:
    project = load_project([str(root)])
    return lint_source(SourceFile.from_text(str(path), path.read_text()), [code], Settings(), project=project)


_ALIAS_LOOP = """
from ...kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec


def _plain():
    return None


for _alias, _hw in (("blocked", HardwareRequirement(device_type="any")), ("ascend", HardwareRequirement(device_type="npu"))):
    KERNEL_REGISTRY.register(
        KernelSpec(name=_alias, op_name="token_loss", variant="causal", factory=_plain, hardware=_hw)
    )
    {skip}
    KERNEL_REGISTRY.register(
        KernelSpec(name=_alias, op_name="token_loss", variant="pooled", factory=_plain, hardware=_hw)
    )
"""

_NPU_MODEL = '''
config.add_post_import_block(
    """
    from veomni.ops.dispatch import OpSlot
    veomni_loss = OpSlot("token_loss", "causal")
    veomni_pooled_loss = OpSlot("token_loss", "pooled")
    """
)
'''


def _alias_tree(tmp_path: Path, skip: str) -> Path:
    registry = write_file(
        tmp_path, "veomni/ops/kernels/token_loss/__init__.py", _ALIAS_LOOP.format(skip=skip)
    )
    write_file(tmp_path, "veomni/models/transformers/toy/toy_npu_patch_gen_config.py", _NPU_MODEL)
    return registry


def test_reader_drops_the_iterations_a_guarded_continue_skips() -> None:
    tree = ast.parse(_ALIAS_LOOP.format(skip='if _alias in ("ascend",):\n        continue'))
    rows = {(r.variant, r.impl) for r, _line in read_registry_rows(tree)[3]}
    assert rows == {("causal", "blocked"), ("causal", "ascend"), ("pooled", "blocked")}


def test_npu_alias_skipping_a_selected_variant_is_reported(tmp_path: Path) -> None:
    registry = _alias_tree(tmp_path, 'if _alias == "ascend":\n        continue')
    diags = _lint(tmp_path, registry, "NPU209")
    assert len(diags) == 1
    assert "`ascend`" in diags[0].message and "`pooled`" in diags[0].message
    assert diags[0].line == 15  # the pooled row the alias no longer reaches


def test_npu_alias_covering_every_selected_variant_is_quiet(tmp_path: Path) -> None:
    registry = _alias_tree(tmp_path, 'if _alias == "unused":\n        continue')
    assert _lint(tmp_path, registry, "NPU209") == []


_REGISTER_ROWS = """
from ...registry import register_op
from ...requirement import CudaKernelRequirement, NpuKernelRequirement
from .mix import ascend as mix_ascend
from .mix import cuda as mix_cuda

register_op("token_mix", "standard", "cuda_fused", mix_cuda.run, requirement=CudaKernelRequirement())
register_op(
    "token_mix",
    "standard",
    "{name}",
    mix_ascend.run,
    requirement=NpuKernelRequirement(),
)
register_op("gate_mix", "standard", "ascend", mix_ascend.gate, requirement=NpuKernelRequirement())
"""


def test_npu_kernel_under_the_cuda_name_is_reported_on_the_name(tmp_path: Path) -> None:
    registry = write_file(
        tmp_path, "veomni/ops/kernels/token_mix/__init__.py", _REGISTER_ROWS.format(name="cuda_fused")
    )
    diags = _lint(tmp_path, registry, "NPU213")
    assert [d.line for d in diags] == [10]
    assert "`cuda_fused`" in diags[0].message and "`ascend`" in diags[0].message


def test_npu_kernel_under_its_own_name_is_quiet(tmp_path: Path) -> None:
    registry = write_file(
        tmp_path, "veomni/ops/kernels/token_mix/__init__.py", _REGISTER_ROWS.format(name="ascend")
    )
    assert _lint(tmp_path, registry, "NPU213") == []


_OPS_CONFIG = """
from dataclasses import dataclass, field

ASCEND_NPU_CHOICES = {{
    "attn_norm_implementation": frozenset({{"npu"}}),
    "router_implementation": frozenset({{"fused_npu", "eager"}}),
    "act_implementation": frozenset(),
}}

ASCEND_NPU_SWAP = {{
    "attn_norm_implementation": "npu",
{extra}}}


@dataclass
class KernelConfig:
    attn_norm_implementation: str = "liger_kernel"
    router_implementation: str = field(default="{router}", metadata={{"help": "router"}})
    act_implementation: str = "eager"
"""


def _lint_config(text: str) -> list:
    src = SourceFile.from_text("veomni/arguments/kernel_config.py", textwrap.dedent(text).lstrip())
    return lint_source(src, ["NPU212"], Settings())


def test_fallback_missing_a_field_with_a_gpu_only_default() -> None:
    diags = _lint_config(_OPS_CONFIG.format(extra="", router="fused_cuda"))
    assert len(diags) == 1 and diags[0].line == 10
    assert '`router_implementation` (default "fused_cuda")' in diags[0].message
    assert "`ASCEND_NPU_SWAP`" in diags[0].message


def test_fallback_value_the_allow_list_rejects() -> None:
    diags = _lint_config(
        _OPS_CONFIG.format(extra='    "router_implementation": "fused_cuda",\n', router="fused_cuda")
    )
    assert len(diags) == 1 and '"fused_cuda"' in diags[0].message and diags[0].line == 11


def test_quiet_when_the_default_is_allowed_or_covered() -> None:
    assert _lint_config(_OPS_CONFIG.format(extra="", router="fused_npu")) == []
    assert (
        _lint_config(_OPS_CONFIG.format(extra='    "router_implementation": "fused_npu",\n', router="x"))
        == []
    )


_DEFAULT_HANDLE = """
from veomni.ops import VeomniOp
from veomni.models_kernel.utils.op_utils import resolve_op_impl


def mix_tokens(x, scan={handle}):
    return scan(x)
"""


def _lint_generated(text: str) -> list:
    src = SourceFile.from_text(
        "veomni/models_kernel/transformers/toy/generated/patched_modeling_toy_gpu.py",
        textwrap.dedent(text).lstrip(),
    )
    return lint_source(src, ["NPU201"], Settings())


def test_handle_built_as_a_default_argument_is_import_time() -> None:
    diags = _lint_generated(
        _DEFAULT_HANDLE.format(
            handle='VeomniOp("prefix_scan", "standard", resolve_op_impl("prefix_scan_implementation"))'
        )
    )
    assert len(diags) == 1 and diags[0].line == 5
    assert "`mix_tokens`" in diags[0].message and diags[0].fix is None


def test_handle_built_in_the_body_is_quiet() -> None:
    code = _DEFAULT_HANDLE.format(handle="None").replace(
        "    return scan(x)",
        '    scan = scan or VeomniOp("prefix_scan", "standard", resolve_op_impl("prefix_scan_implementation"))\n'
        "    return scan(x)",
    )
    assert _lint_generated(code) == []


_ORDER = """
from dataclasses import dataclass


@dataclass
class ScanKernels:
    scan_implementation: str = "triton"

    def __post_init__(self):
{calls}

    def _npu_defaults_for_ascend(self):
        self.scan_implementation = "eager"

    def _check_backends(self):
        pass
"""


def _lint_order(calls: str) -> list:
    src = SourceFile.from_text(
        "veomni/arguments/scan_kernels.py", textwrap.dedent(_ORDER.format(calls=calls))
    )
    return lint_source(src, ["NPU210"], Settings())


def test_fallback_applied_after_the_validation_is_reported() -> None:
    diags = _lint_order("        self._check_backends()\n        self._npu_defaults_for_ascend()")
    assert len(diags) == 1 and "after `self._check_backends()`" in diags[0].message


def test_fallback_applied_before_the_validation_is_quiet() -> None:
    assert _lint_order("        self._npu_defaults_for_ascend()\n        self._check_backends()") == []
