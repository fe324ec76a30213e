"""Precision fixes after review rev16b: the correct variants the reviewer wrote must stay quiet, the rules' true
positives (and transfer variants in other regions, with other names) must keep reporting."""

from __future__ import annotations

import textwrap

import pytest

from tests.rules.snippets import lint_snippet

# -- NPU237: only device-neutral wiring applied in one device branch ---------------------------------------------
_SWITCH = """
from ....utils.device import IS_NPU_AVAILABLE
import warnings


def register(arch):
    if IS_NPU_AVAILABLE:
        from .generated import patched_modeling_m_npu as gen
{npu}
    else:
        from .generated import patched_modeling_m_gpu as gen
{gpu}
    return gen.MForCausalLM
"""


def _switch(npu: str = "", gpu: str = "") -> str:
    return _SWITCH.format(npu=textwrap.indent(npu, " " * 8), gpu=textwrap.indent(gpu, " " * 8))


_QUIET_237 = [
    _switch(npu='logger.info_rank0("using NPU modeling %s", gen.__name__)'),
    _switch(npu="gen.npu_fused_ops_enable(True)"),
    _switch(npu='assert hasattr(gen, "MForCausalLM"), gen.__file__'),
    _switch(
        gpu='if not hasattr(gen, "flash_attn_varlen_func"):\n    warnings.warn(f"{gen.__name__} no flash-attn")'
    ),
    _switch(npu="gen.MForCausalLM._supports_flex_attn = False"),
    _switch(gpu="gen.install_cuda_graphs()"),
    _switch(gpu="gen.MModel.apply_rotary = staticmethod(liger_rope)"),
    _switch(npu='gen.MForCausalLM._no_split_modules = ["MDecoderLayer"]'),
    _switch(gpu="enable_triton_kernels(gen)"),
    _switch(npu="print(gen.__name__)"),
]


@pytest.mark.parametrize(
    "path", ["veomni/models/transformers/m/__init__.py", "veomni/models/seed_omni/m/__init__.py"]
)
@pytest.mark.parametrize("text", _QUIET_237)
def test_npu237_one_sided_legitimately(path: str, text: str) -> None:
    assert lint_snippet(path, text, ["NPU237"]) == []


_REPORTS_237 = [
    ("veomni/models/transformers/m/__init__.py", _switch(gpu="attach_lora_hooks(gen.MForCausalLM)")),
    (
        "veomni/models/seed_omni/m/__init__.py",
        _switch(npu="gen.MModel._checkpoint_converter = build_converter()"),
    ),
    ("veomni/models/diffusers/m/__init__.py", _switch(gpu="gen.register_hooks()")),
    ("veomni/models/transformers/m/__init__.py", _switch(npu='patch_model_module(gen, "m")')),
    (
        "veomni/models/transformers/m/__init__.py",
        _switch(gpu="gen.MModel.forward = wrap_forward(gen.MModel.forward)"),
    ),
]


@pytest.mark.parametrize("path,text", _REPORTS_237)
def test_npu237_still_reports_neutral_wiring(path: str, text: str) -> None:
    assert [d.code for d in lint_snippet(path, text, ["NPU237"])] == ["NPU237"]


# -- NPU321: refusals only a backward can make, forward refusals through a helper or another spelling -----------
_FN = """
import torch

from .utils import is_arch35, is_npu


def _check_supported():
    if is_arch35():
        raise NotImplementedError("not supported on arch35")


def _require_cuda(t):
    if not t.is_cuda:
        raise RuntimeError("CUDA tensors only")


class Fn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, flag):
{forward}
        ctx.save_for_backward(x, w)
        ctx.flag = flag
        return x * w

    @staticmethod
    def backward(ctx, dy):
{backward}
        x, w = ctx.saved_tensors
        return dy * w, dy * x, None
"""


def _fn(forward: str, backward: str) -> str:
    return _FN.format(forward=textwrap.indent(forward, " " * 8), backward=textwrap.indent(backward, " " * 8))


_QUIET_321 = [
    _fn("_check_supported()", 'if is_arch35():\n    raise NotImplementedError("arch35")'),
    _fn("pass", 'if ctx.needs_input_grad[2]:\n    raise NotImplementedError("no grad for flag")'),
    _fn("pass", 'if dy.dtype == torch.float64:\n    raise TypeError("fp64 grads")'),
    _fn(
        "pass",
        'if ctx.saved_tensors[0].requires_grad and dy.is_sparse:\n    raise NotImplementedError("sparse")',
    ),
    _fn(
        "pass",
        'if ctx.flag and torch.are_deterministic_algorithms_enabled():\n    raise RuntimeError("nondet")',
    ),
    _fn(
        'if x.device.type != "cuda":\n    raise RuntimeError("CUDA only")',
        'if not dy.is_cuda:\n    raise RuntimeError("CUDA")',
    ),
    _fn("_require_cuda(x)", 'if dy.device.type != "cuda":\n    raise RuntimeError("CUDA only")'),
    _fn('assert not is_arch35(), "arch35"', 'if is_arch35():\n    raise NotImplementedError("arch35")'),
]


@pytest.mark.parametrize(
    "path", ["veomni/ops/kernels/toy/_ascend/fn.py", "veomni/distributed/sequence_parallel/fn.py"]
)
@pytest.mark.parametrize("text", _QUIET_321)
def test_npu321_quiet(path: str, text: str) -> None:
    assert lint_snippet(path, text, ["NPU321"]) == []


_REPORTS_321 = [
    (
        "veomni/ops/kernels/toy/_ascend/fn.py",
        _fn("pass", 'if is_arch35():\n    raise NotImplementedError("arch35")'),
    ),
    ("veomni/ops/fused/fn.py", _fn("pass", 'if not dy.is_cuda:\n    raise RuntimeError("CUDA only")')),
    (
        "veomni/models/transformers/m/fn.py",
        _fn("pass", 'if dy.device.type == "npu":\n    raise RuntimeError("no NPU")'),
    ),
    (
        "veomni/distributed/fn.py",
        _fn("pass", 'if is_npu():\n    raise NotImplementedError("no Ascend port")'),
    ),
]


@pytest.mark.parametrize("path,text", _REPORTS_321)
def test_npu321_reports(path: str, text: str) -> None:
    assert [d.code for d in lint_snippet(path, text, ["NPU321"])] == ["NPU321"]


def test_npu321_module_pair_reports_and_helper_quiet() -> None:
    bad = """
    from ....utils.device import IS_NPU_AVAILABLE


    def chunk_fwd(q, k, v):
        return q @ k.transpose(-1, -2) @ v


    def chunk_bwd(do, q, k, v):
        if IS_NPU_AVAILABLE:
            raise NotImplementedError("chunk kernel has no Ascend port")
        return do
    """
    good = bad.replace("def chunk_fwd(q, k, v):\n", "def chunk_fwd(q, k, v):\n        _refuse_npu()\n") + (
        "\n\n    def _refuse_npu():\n        if IS_NPU_AVAILABLE:\n            raise NotImplementedError('no port')\n"
    )
    path = "veomni/ops/kernels/chunk/chunk.py"
    assert [d.code for d in lint_snippet(path, textwrap.dedent(bad), ["NPU321"])] == ["NPU321"]
    assert lint_snippet(path, textwrap.dedent(good), ["NPU321"]) == []


# -- NPU234: wiring done by an import_module loop, an entry script, or an alias ----------------------------------
def _tree_lint(tmp_path, files: dict[str, str], target: str, code: str) -> list:  # noqa: ANN001
    from npu_lint.core.config import Settings
    from npu_lint.core.source import SourceFile
    from npu_lint.engine import lint_source
    from npu_lint.veomni.project import load_project

    files = {"pyproject.toml": "[project]\nname = 'veomni'\n", "veomni/__init__.py": "", **files}
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(textwrap.dedent(text).lstrip("\n"))
    path = tmp_path / target
    project = load_project([str(tmp_path)])
    return [
        d
        for d in lint_source(SourceFile.from_text(str(path), path.read_text()), [code], Settings(), project)
        if d.code == code
    ]


_FAMILY = 'from ...registry import register_op\n\nregister_op("{op}", "standard", "eager", lambda x: x)\n'
_ROWS_TREE = {
    "veomni/ops/registry.py": "def register_op(*args, **kwargs):\n    pass\n",
    "veomni/ops/__init__.py": "from . import kernels  # noqa: F401\n",
    "veomni/ops/kernels/rope/__init__.py": _FAMILY.format(op="rope"),
    "veomni/ops/kernels/swiglu/__init__.py": _FAMILY.format(op="swiglu"),
}
_KERNELS = "veomni/ops/kernels/__init__.py"


@pytest.mark.parametrize(
    "text",
    [
        'import importlib\n\nfor _fam in ("rope", "swiglu"):\n    importlib.import_module(f"{__name__}.{_fam}")\n',
        'from importlib import import_module\n\nfor name in ["rope", "swiglu"]:\n    import_module(f"{__package__}.{name}")\n',
        'import importlib\n\nimportlib.import_module(".rope", __name__)\nimportlib.import_module("veomni.ops.kernels.swiglu")\n',
        "from . import rope, swiglu  # noqa: F401\n",
    ],
)
def test_npu234_dynamic_family_imports_quiet(tmp_path, text: str) -> None:  # noqa: ANN001
    assert _tree_lint(tmp_path, {**_ROWS_TREE, _KERNELS: text}, _KERNELS, "NPU234") == []


def test_npu234_dynamic_loop_missing_a_family_reports(tmp_path) -> None:  # noqa: ANN001
    text = 'import importlib\n\nfor _fam in ("rope",):\n    importlib.import_module(f"{__name__}.{_fam}")\n'
    got = _tree_lint(tmp_path, {**_ROWS_TREE, _KERNELS: text}, _KERNELS, "NPU234")
    assert len(got) == 1 and "swiglu" in got[0].message


_INSTALLER_TREE = {
    "veomni/ops/install.py": "def apply_ops_patch():\n    pass\n",
    "veomni/loss/mapping.py": "def install_loss_mapping():\n    pass\n",
    "veomni/ops/__init__.py": "from .install import apply_ops_patch\n",
    "veomni/loss/__init__.py": "from .mapping import install_loss_mapping\n",
}


@pytest.mark.parametrize(
    "target,extra",
    [
        (
            "veomni/ops/__init__.py",
            {"tasks/train.py": "from veomni.ops import apply_ops_patch\n\napply_ops_patch()\n"},
        ),
        (
            "veomni/loss/__init__.py",
            {
                "scripts/launch.py": "import veomni.loss as L\nfrom veomni.loss import install_loss_mapping\n\n\ndef main():\n    install_loss_mapping()\n"
            },
        ),
        (
            "veomni/ops/__init__.py",
            {"veomni/__init__.py": "from .ops import apply_ops_patch as _apply\n\n_apply()\n"},
        ),
        (
            "veomni/loss/__init__.py",
            {
                "veomni/trainer/base.py": "from veomni.loss import install_loss_mapping as _wire\n\n\ndef build():\n    _wire()\n"
            },
        ),
    ],
)
def test_npu234_installer_called_elsewhere_quiet(tmp_path, target: str, extra: dict) -> None:  # noqa: ANN001
    assert _tree_lint(tmp_path, {**_INSTALLER_TREE, **extra}, target, "NPU234") == []


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"tasks/train.py": "from veomni.ops import apply_ops_patch  # noqa: F401\n"},
        {"tests/test_ops.py": "from veomni.ops import apply_ops_patch\n\napply_ops_patch()\n"},
        {"veomni/__init__.py": "from .ops import apply_ops_patch as _apply  # noqa: F401\n"},
    ],
)
def test_npu234_installer_never_called_reports(tmp_path, extra: dict) -> None:  # noqa: ANN001
    got = _tree_lint(tmp_path, {**_INSTALLER_TREE, **extra}, "veomni/ops/__init__.py", "NPU234")
    assert [d.code for d in got] == ["NPU234"]


# -- NPU319: a probe another tree module imports from this one is a re-export ------------------------------------
_PROBES = {
    "veomni/ops/__init__.py": "",  # a VeOmni root (veomni/ops)
    "veomni/utils/device.py": "IS_CUDA_AVAILABLE = True\nIS_NPU_AVAILABLE = False\n",
    "veomni/utils/import_utils.py": "def is_torch_npu_available():\n    return False\n",
}
_COMPAT = """
from {up}utils.import_utils import is_torch_npu_available
from {up}utils.device import IS_CUDA_AVAILABLE


def to_device(x, device):
    return x.to(device)
"""


@pytest.mark.parametrize(
    "target,importer,text",
    [
        (
            "veomni/ops/kernels/toy/compat.py",
            "veomni/ops/kernels/toy/user.py",
            "from .compat import {names}\n",
        ),
        ("veomni/data/compat.py", "veomni/data/collator.py", "from veomni.data.compat import {names}\n"),
        (
            "veomni/distributed/compat.py",
            "veomni/trainer/base.py",
            "from ..distributed.compat import {names}\n",
        ),
    ],
)
def test_npu319_reexported_probe_quiet(tmp_path, target: str, importer: str, text: str) -> None:  # noqa: ANN001
    up = "." * (target.count("/"))
    both = "IS_CUDA_AVAILABLE, is_torch_npu_available"
    files = {**_PROBES, target: _COMPAT.format(up=up), importer: text.format(names=both)}
    assert _tree_lint(tmp_path, files, target, "NPU319") == []
    # only one of the two probes is imported from here: the other is still unread
    files[importer] = text.format(names="is_torch_npu_available")
    got = _tree_lint(tmp_path, files, target, "NPU319")
    assert len(got) == 1 and "IS_CUDA_AVAILABLE" in got[0].message


def test_npu319_importer_of_another_module_does_not_count(tmp_path) -> None:  # noqa: ANN001
    target = "veomni/ops/kernels/toy/compat.py"
    files = {
        **_PROBES,
        target: _COMPAT.format(up="...."),
        "veomni/ops/kernels/toy/user.py": "from ....utils.device import IS_CUDA_AVAILABLE\n"
        "from ....utils.import_utils import is_torch_npu_available\n",
    }
    assert len(_tree_lint(tmp_path, files, target, "NPU319")) == 2


# -- NPU320: only operators the tree defines, judged by the import closure (no built-in catalog) -----------------
_REG = '@torch.library.custom_op("toyops::gelu", mutates_args=())\ndef gelu(x: torch.Tensor) -> torch.Tensor:\n    return x\n'


@pytest.mark.parametrize(
    "text",
    [
        # torch_npu kernels a catalog once missed, extension and torch namespaces: not defined by the tree
        "import torch\nimport torch_npu\n\n\ndef f(x, q, k):\n    return torch.ops.npu.npu_mrope(x, q, k, x, [16, 24, 24]), torch.ops.npu.npu_gmm_v2\n",
        "import torch\n\ntorch.ops.load_library('libmindspeed_ops.so')\n\n\ndef f(x):\n    return torch.ops.mindspeed.npu_rope(x)\n",
        "import torch\n\n\ndef f(x):\n    return torch.ops.aten.add.Tensor(x, x), torch.ops._c10d_functional.wait_tensor(x)\n",
        # the tree's operator, its definition imported (directly or defined here)
        "import torch\n\nfrom . import reg  # noqa: F401\n\n\ndef f(x):\n    return torch.ops.toyops.gelu(x)\n",
        "import torch\n\n" + _REG + "\n\ndef f(x):\n    return torch.ops.toyops.gelu.default(x)\n",
    ],
)
def test_npu320_quiet(tmp_path, text: str) -> None:  # noqa: ANN001
    files = {"veomni/ops/__init__.py": "", "veomni/ops/kernels/toy/reg.py": "import torch\n\n\n" + _REG}
    target = "veomni/ops/kernels/toy/use.py"
    assert _tree_lint(tmp_path, {**files, target: text}, target, "NPU320") == []


@pytest.mark.parametrize(
    "target",
    [
        "veomni/ops/kernels/toy/use.py",
        "veomni/models/transformers/toy/modeling_toy.py",
        "veomni/trainer/toy.py",
    ],
)
def test_npu320_tree_operator_without_its_import_reports(tmp_path, target: str) -> None:  # noqa: ANN001
    files = {"veomni/ops/__init__.py": "", "veomni/ops/kernels/toy/reg.py": "import torch\n\n\n" + _REG}
    text = "import torch\n\n\ndef f(x):\n    return torch.ops.toyops.gelu(x)\n"
    got = _tree_lint(tmp_path, {**files, target: text}, target, "NPU320")
    assert len(got) == 1 and "veomni.ops.kernels.toy.reg" in got[0].message


# -- NPU308: the package-loaded closure reports only what the module itself would be reported for ---------------
def _moe(tmp_path, kernel: str, direct: str = "") -> list:  # noqa: ANN001
    files = {
        "veomni/ops/__init__.py": "",
        "veomni/distributed/moe/__init__.py": "from .moe_layer import MoELayer\n",
        "veomni/distributed/moe/fused_kernels.py": kernel,
        "veomni/distributed/moe/moe_layer.py": f"{direct}from . import fused_kernels\n\n\nclass MoELayer:\n    pass\n",
    }
    return _tree_lint(tmp_path, files, "veomni/distributed/moe/moe_layer.py", "NPU308")


_TRITON = "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef _k(x_ptr, BLOCK: tl.constexpr):\n    pass\n"


@pytest.mark.parametrize(
    "kernel",
    [
        _TRITON,
        "import triton\n",
        "try:\n    from liger_kernel.ops.swiglu import LigerSiLUMulFunction\nexcept ImportError:\n    LigerSiLUMulFunction = None\n",
    ],
)
def test_npu308_bare_triton_one_module_away_quiet(tmp_path, kernel: str) -> None:  # noqa: ANN001
    assert _moe(tmp_path, kernel) == []
    assert (
        _moe(tmp_path / "direct", "", direct="import triton\n") == []
    )  # the same import in the module itself


@pytest.mark.parametrize(
    "kernel",
    [
        "from liger_kernel.ops.swiglu import LigerSiLUMulFunction\n",
        "import flash_attn\n",
        "from quack.gemm import gemm\n",
    ],
)
def test_npu308_gpu_package_one_module_away_reports(tmp_path, kernel: str) -> None:  # noqa: ANN001
    assert [d.code for d in _moe(tmp_path, kernel)] == ["NPU308"]


@pytest.mark.parametrize(
    "factory",
    [
        # the tree's own backend factory imports the Triton kernel module only on demand
        "def build():\n    from ..distributed.moe.fused_kernels import _k\n\n    return _k\n",
        "from ..utils.import_utils import is_torch_npu_available\n\nif not is_torch_npu_available():\n"
        "    from ..distributed.moe import fused_kernels\n",
    ],
)
def test_npu308_triton_kernel_module_the_tree_loads_on_demand_reports(tmp_path, factory: str) -> None:  # noqa: ANN001
    files = {
        "veomni/ops/__init__.py": "",
        "veomni/utils/import_utils.py": "def is_torch_npu_available():\n    return False\n",
        "veomni/distributed/moe/__init__.py": "from .moe_layer import MoELayer\n",
        "veomni/distributed/moe/fused_kernels.py": _TRITON,
        "veomni/distributed/moe/moe_layer.py": "from . import fused_kernels\n\n\nclass MoELayer:\n    pass\n",
        "veomni/ops/moe_backend.py": factory,
    }
    got = _tree_lint(tmp_path, files, "veomni/distributed/moe/moe_layer.py", "NPU308")
    assert [d.code for d in got] == ["NPU308"]
