"""Round-7 dev contracts of the device / dispatch / vendor families, checked where the tree states them: NPU rows
and backends must be reachable on an NPU host (NPU215/NPU216/NPU217), kernel binders must get the resolved kernel
(NPU218), NPU-choosing parameters must be read (NPU219), dispatch handles must not become process-wide through
``global`` (NPU201) nor be read from the registry by a literal (NPU204), device branches and device-named classes
must agree with the device they use (NPU107), and model code must not route into a vendor-only helper (NPU306).
Own ops, names and shapes (each defect written several ways); trees built in tmp_path."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni.project import load_project
from tests.rules.snippets import write_file


def _lint(root: Path, path: Path, code: str) -> list:
    project = load_project([str(root)])
    return lint_source(SourceFile.from_text(str(path), path.read_text()), [code], Settings(), project=project)


def _text(source: str, code: str, path: str = "veomni/utils/toy.py") -> list:
    return lint_source(SourceFile.from_text(path, textwrap.dedent(source).lstrip()), [code], Settings())


# -- NPU215: the row the NPU path remaps to is registered for CUDA only ----------------------------------------

_LOSS_ROWS = """
from ...registry import register_op
from ...requirement import CudaKernelRequirement, {extra}
from .token_loss import blocked, eager

register_op("token_loss", "standard", "eager", eager.fwd, eager.bwd)
register_op("token_loss", "standard", "blocked", blocked.fwd, blocked.bwd, requirement={req})
"""

_REMAP_SPEC = """
from veomni.models_kernel.utils.op_utils import resolve_op_impl


def toy_forcausallm_init_patched(self, config):
    impl = resolve_op_impl("token_loss_implementation", npu_as="blocked")
    self.loss_fn = impl
"""


@pytest.mark.parametrize(
    "req,extra,expected",
    [
        ("CudaKernelRequirement()", "NpuKernelRequirement", 1),
        ("_CUDA", "NpuKernelRequirement\n_CUDA = CudaKernelRequirement()", 1),  # through a module constant
        ("None", "NpuKernelRequirement", 0),  # any device: the NPU reaches it
    ],
)
def test_npu_remap_target_registered_cuda_only(tmp_path: Path, req: str, extra: str, expected: int) -> None:
    registry = write_file(
        tmp_path, "veomni/ops/kernels/token_loss/__init__.py", _LOSS_ROWS.format(req=req, extra=extra)
    )
    write_file(tmp_path, "veomni/models_kernel/transformers/toy/toy_gpu_patch_gen_config.py", _REMAP_SPEC)
    diags = _lint(tmp_path, registry, "NPU215")
    assert len(diags) == expected
    if expected:
        assert "token_loss/standard/blocked" in diags[0].message and "npu_as" in diags[0].message


def test_npu_remap_target_with_an_npu_row_as_well_is_quiet(tmp_path: Path) -> None:
    text = _LOSS_ROWS.format(req="CudaKernelRequirement()", extra="NpuKernelRequirement") + (
        'register_op("token_loss", "standard", "blocked", blocked.fwd, blocked.bwd, '
        "requirement=NpuKernelRequirement())\n"
    )
    registry = write_file(tmp_path, "veomni/ops/kernels/token_loss/__init__.py", text)
    write_file(tmp_path, "veomni/models_kernel/transformers/toy/toy_gpu_patch_gen_config.py", _REMAP_SPEC)
    assert _lint(tmp_path, registry, "NPU215") == []


def test_npu_backend_requiring_gpu_packages_variants() -> None:
    source = """
    from ...config.registry import BackendSpec

    _CUTLASS = ("cutlass_ext",)
    PER_MODEL = {
        "gelu_mlp": {
            "cutlass": BackendSpec(entry="veomni.ops.kernels.mlp.cutlass:mlp", requires=["cutlass_ext"]),
            "ascend_npu": BackendSpec(entry="veomni.ops.kernels.mlp.npu:mlp", requires=_CUTLASS),
            "npu_fast": BackendSpec(entry="veomni.ops.kernels.mlp.npu:fast", requires="flash_attn"),
            "npu": BackendSpec(entry="veomni.ops.kernels.mlp.npu:mlp", requires=("torch_npu",)),
        }
    }
    """
    diags = _text(source, "NPU215", "veomni/ops/kernels/mlp/__init__.py")
    assert [d.line for d in diags] == [7, 8]
    assert "`cutlass` entry" in diags[0].message and "GPU-only vendor" in diags[1].message


# -- NPU216: the NPU default table keeps a GPU-only implementation --------------------------------------------

_TABLE = """
from typing import Dict

NPU_SWAP: Dict[str, str] = {{
    "aux_loss_implementation": "{aux}",
    "norm_implementation": "npu",
}}
"""

_AUX_ROWS = """
from ...kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec

for _name, _hw in (("fused", HardwareRequirement(device_type="gpu")), ("eager", None)):
    KERNEL_REGISTRY.register(KernelSpec(name=_name, op_name="aux_loss", variant="standard", factory=None, hardware=_hw))
KERNEL_REGISTRY.register(
    KernelSpec(name="npu", op_name="norm", variant="standard", factory=None, hardware=HardwareRequirement(device_type="npu"))
)
"""


@pytest.mark.parametrize("aux,expected", [("fused", 1), ("eager", 0), ("unknown_name", 0)])
def test_npu_default_table_against_the_tree_rows(tmp_path: Path, aux: str, expected: int) -> None:
    write_file(tmp_path, "veomni/ops/kernels/aux_loss/__init__.py", _AUX_ROWS)
    args = write_file(tmp_path, "veomni/arguments/ops_args.py", _TABLE.format(aux=aux))
    diags = _lint(tmp_path, args, "NPU216")
    assert len(diags) == expected
    if expected:
        assert '"fused"' in diags[0].message and "aux_loss/standard" in diags[0].message


# -- NPU217: per-model backend tables ----------------------------------------------------------------------------

_NORM_ROWS = """
from ...kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec

KERNEL_REGISTRY.register(
    KernelSpec(name="npu", op_name="layer_norm", variant="standard", factory=None, hardware=HardwareRequirement(device_type="npu"))
)
"""

_PATCH = """
from ....ops.config.registry import BackendSpec, apply_per_model_patches

_TABLE = {{
    "layer_norm": {{
        "liger_kernel": BackendSpec(entry="veomni.models.transformers.toy.toy_npu_ops:{entry}", requires=("liger_kernel",)),
        {npu_entry}
    }},
}}


def apply_toy_device_patch(gen_module):
    apply_per_model_patches(hf_module=gen_module, model_name="Toy", targets={{"layer_norm": "ToyNorm"}}, extra_backends=_TABLE)
"""

_NPU_OPS = """
def norm_forward(self, hidden_states):
    return hidden_states


def make_norm_forward():
    return norm_forward


class FusedNorm:
    pass
"""


@pytest.mark.parametrize(
    "npu_entry,expected",
    [
        ('"npu": None,', 1),  # disabled although the tree registers NPU norm kernels
        ('"npu": BackendSpec(entry="veomni.models.transformers.toy.toy_npu_ops:norm_forward"),', 1),
        (
            '"npu": BackendSpec(entry="veomni.models.transformers.toy.toy_npu_ops:norm_forward", replace_forward=True),',
            0,
        ),
        (
            '"npu": BackendSpec(entry="veomni.models.transformers.toy.toy_npu_ops:make_norm_forward", entry_is_factory=True),',
            0,
        ),
        ('"npu": BackendSpec(entry="veomni.models.transformers.toy.toy_npu_ops:FusedNorm"),', 0),
    ],
)
def test_per_model_npu_backend(tmp_path: Path, npu_entry: str, expected: int) -> None:
    write_file(tmp_path, "veomni/ops/kernels/layer_norm/__init__.py", _NORM_ROWS)
    write_file(tmp_path, "veomni/models/transformers/toy/toy_npu_ops.py", _NPU_OPS)
    patch = write_file(
        tmp_path,
        "veomni/models/transformers/toy/device_patch.py",
        _PATCH.format(entry="FusedNorm", npu_entry=npu_entry),
    )
    assert len(_lint(tmp_path, patch, "NPU217")) == expected


@pytest.mark.parametrize(
    "table",
    [
        '_ROPE = {"triton": None, "npu": None}\n_TABLE = {"layer_norm": _ROPE}\n',
        '_TABLE = {"layer_norm": dict(triton=None, npu=None)}\n',
    ],
)
def test_npu_backend_disabled_through_a_constant_or_dict_call(tmp_path: Path, table: str) -> None:
    write_file(tmp_path, "veomni/ops/kernels/layer_norm/__init__.py", _NORM_ROWS)
    patch = write_file(
        tmp_path,
        "veomni/models/transformers/toy/device_patch.py",
        "from ....ops.config.registry import BackendSpec, apply_per_model_patches\n\n" + table,
    )
    diags = _lint(tmp_path, patch, "NPU217")
    assert len(diags) == 1 and "`layer_norm`" in diags[0].message


def test_a_curated_backend_list_that_disables_several_defaults_is_quiet(tmp_path: Path) -> None:
    """veomni 0.1.12's deepseek_v4 disables both registry defaults (`liger_kernel`, `npu`) and binds its own Triton
    kernel: the generic kernels do not implement its interleaved partial rotary (a deliberate list, not an
    oversight). One `None` beside a bound backend is still reported (the test above)."""
    write_file(tmp_path, "veomni/ops/kernels/layer_norm/__init__.py", _NORM_ROWS)
    write_file(tmp_path, "veomni/models/transformers/toy/toy_npu_ops.py", _NPU_OPS)
    table = (
        '_TABLE = {"layer_norm": {"liger_kernel": None, "npu": None, '
        '"triton": BackendSpec(entry="veomni.models.transformers.toy.toy_npu_ops:FusedNorm")}}\n'
    )
    patch = write_file(
        tmp_path,
        "veomni/models/transformers/toy/device_patch.py",
        "from ....ops.config.registry import BackendSpec, apply_per_model_patches\n\n" + table,
    )
    assert _lint(tmp_path, patch, "NPU217") == []


def test_disabling_a_backend_the_tree_has_no_npu_rows_for_is_quiet(tmp_path: Path) -> None:
    write_file(
        tmp_path, "veomni/ops/kernels/layer_norm/__init__.py", _NORM_ROWS.replace('"layer_norm"', '"other"')
    )
    write_file(tmp_path, "veomni/models/transformers/toy/toy_npu_ops.py", _NPU_OPS)
    patch = write_file(
        tmp_path,
        "veomni/models/transformers/toy/device_patch.py",
        _PATCH.format(entry="FusedNorm", npu_entry='"npu": None,'),
    )
    assert _lint(tmp_path, patch, "NPU217") == []


# -- NPU218: a kernel binder called without the resolved kernel --------------------------------------------------

_BINDER = """
from ...kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec

KERNEL_REGISTRY.register(
    KernelSpec(name="cutlass", op_name="expert_gemm", variant="standard", factory=None, hardware=HardwareRequirement(device_type="gpu"))
)
KERNEL_REGISTRY.register(
    KernelSpec(name="npu", op_name="expert_gemm", variant="standard", factory=None, hardware=HardwareRequirement(device_type="npu"))
)


def bind_expert_gemm(model=None, kernel: str = "cutlass", *, strict: str = "npu") -> None:
    return None
"""


@pytest.mark.parametrize(
    "call,expected",
    [
        ("from ..ops.kernels.expert_gemm import bind_expert_gemm\n    bind_expert_gemm(model)", 1),
        ("from veomni.ops.kernels.expert_gemm import bind_expert_gemm as _bind\n    _bind()", 1),
        ("from ..ops.kernels.expert_gemm import bind_expert_gemm\n    bind_expert_gemm(model, kernel)", 0),
        ("from ..ops.kernels.expert_gemm import bind_expert_gemm\n    bind_expert_gemm(kernel=kernel)", 0),
        ("from ..ops.kernels.expert_gemm import bind_expert_gemm\n    bind_expert_gemm(**options)", 0),
        ("from ..ops import kernels\n    kernels.expert_gemm.bind_expert_gemm(model)", 1),  # through a module
        ("import veomni.ops.kernels.expert_gemm as eg\n    eg.bind_expert_gemm(model, strict='npu')", 1),
    ],
)
def test_binder_default_omitted(tmp_path: Path, call: str, expected: int) -> None:
    write_file(tmp_path, "veomni/ops/kernels/expert_gemm/__init__.py", _BINDER)
    caller = write_file(
        tmp_path,
        "veomni/models/builder.py",
        f"def build(model, kernel, options):\n    {call}\n    return model\n",
    )
    diags = _lint(tmp_path, caller, "NPU218")
    assert len(diags) == expected
    if expected:
        assert "`kernel`" in diags[0].message and '"cutlass"' in diags[0].message


# -- NPU219 ------------------------------------------------------------------------------------------------------


def test_npu_parameter_ignored_variants() -> None:
    source = """
    class Binder:
        def pick(self, name, on_npu=False):
            return name

        def pick_read(self, name, on_npu=False):
            return name + "_npu" if on_npu else name


    def build(kernel, npu_kernel):
        return {"kernel": kernel}


    def embed(inputs_embeds, input_ids=None):  # "npu" inside a word (inputs) is not the NPU
        return 0
    """
    diags = _text(source, "NPU219")
    assert [d.line for d in diags] == [3, 10]  # at the return that answers without the parameter


# -- NPU201 / NPU204 ---------------------------------------------------------------------------------------------


def test_global_rebinding_of_a_registry_read() -> None:
    source = """
    from veomni.ops.kernel_registry import KERNEL_REGISTRY

    _conv = None


    def setup_conv(config):
        global _conv
        _conv = KERNEL_REGISTRY.resolve("short_conv", "standard", config.ops.short_conv_implementation)


    def set_conv_locally(config):
        conv = KERNEL_REGISTRY.resolve("short_conv", "standard", config.ops.short_conv_implementation)
        return conv
    """
    diags = _text(source, "NPU201", "veomni/models/transformers/toy/modeling_toy.py")
    assert [d.line for d in diags] == [8]
    assert "`_conv`" in diags[0].message


def test_registry_read_by_literal_variants() -> None:
    source = """
    from veomni.ops import kernel_registry


    class Mixer:
        def __init__(self, config):
            self.a = kernel_registry.KERNEL_REGISTRY.resolve("causal_conv1d", "standard", "tilelang")
            self.b = kernel_registry.KERNEL_REGISTRY.resolve("causal_conv1d", "standard", "eager")
            self.c = kernel_registry.KERNEL_REGISTRY.resolve(
                "causal_conv1d", "standard", config.ops_config.causal_conv1d_implementation
            )
    """
    diags = _text(source, "NPU204", "veomni/models/transformers/toy/modeling_toy.py")
    assert [d.line for d in diags] == [6]


# -- NPU107 ------------------------------------------------------------------------------------------------------


def test_device_branch_mismatch_variants() -> None:
    source = """
    import torch

    from veomni.utils.device import get_device_type


    def release():
        if get_device_type() == "npu":
            torch.cuda.empty_cache()
        elif get_device_type() == "cuda":
            torch.npu.empty_cache()


    def sync(is_npu_host):
        if not is_torch_npu_available():
            torch.cuda.synchronize()
        else:
            torch.cuda.synchronize()
        if torch.npu.is_available() and is_npu_host:
            torch.npu.synchronize()
    """
    diags = _text(source, "NPU107")
    assert [d.line for d in diags] == [8, 10, 17]


def test_requirement_class_device_key_from_its_probe() -> None:
    source = """
    from veomni.utils.device import IS_NPU_AVAILABLE


    class AscendOnly:
        device = "mlu"

        def is_available(self):
            return IS_NPU_AVAILABLE


    class MluOnly:
        device = "mlu"


    class NpuHardware:
        device_type = "npu"
    """
    diags = _text(source, "NPU107", "veomni/ops/requirement.py")
    assert [d.line for d in diags] == [5]


# -- NPU306 ------------------------------------------------------------------------------------------------------


def test_call_into_vendor_path_variants(tmp_path: Path) -> None:
    source = """
    import torch


    def _liger_norm(x, w):
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction

        return LigerRMSNormFunction.apply(x, w)


    def _guarded_norm(x, w):
        try:
            from liger_kernel.ops.rms_norm import LigerRMSNormFunction
        except ImportError:
            return x * w
        return LigerRMSNormFunction.apply(x, w)


    class Block(torch.nn.Module):
        def forward(self, x):
            for _ in range(2):
                x = _liger_norm(x, self.weight)
            x = _guarded_norm(x, self.weight)
            if self.use_fused_norm:
                x = _liger_norm(x, self.weight)
            return x
    """
    diags = _text(source, "NPU306", "veomni/models/transformers/toy/modeling_toy.py")
    assert [d.line for d in diags] == [21]
    assert "liger_kernel.ops.rms_norm" in diags[0].message


def test_hard_coded_lookup_device_in_the_kernel_layer() -> None:
    source = """
    class Rows:
        def find(self, op, impl):
            device_type = "cuda"
            return self.rows.get((op, impl, device_type))

        def find_gpu(self, op, impl, host):
            if host == "cuda":
                device = "cuda"
                return self.rows[op, impl, device]
            return None

        def describe(self, op):
            device = "cuda"
            return f"{op} on {device}"
    """
    assert [d.line for d in _text(source, "NPU107", "veomni/ops/rows.py")] == [3]
    assert _text(source, "NPU107", "veomni/models/rows.py") == []  # model code: NPU102's


# -- NPU307 ------------------------------------------------------------------------------------------------------


def test_grouped_matmul_group_list_dtype_variants() -> None:
    source = """
    import torch
    import torch_npu


    def ep_forward(x, w, experts, group):
        experts = experts.to(dtype=torch.int32)
        splits, per_expert = exchange_counts(experts, group)
        return torch_npu.npu_grouped_matmul([x], [w], group_list=per_expert, group_type=0)


    def ep_forward_cast(x, w, experts, group):
        experts = experts.int()
        splits, per_expert = exchange_counts(experts, group)
        sizes = per_expert.long()
        return torch_npu.npu_grouped_matmul([x], [w], group_list=sizes, group_type=0)


    def ep_forward_helper(x, w, experts, group):
        experts = experts.to(torch.int32)
        return my_grouped_gemm(x, w, torch.bincount(experts))
    """
    diags = _text(source, "NPU307", "veomni/ops/kernels/toy_moe/npu_ep.py")
    assert [d.line for d in diags] == [8, 20]
