"""Round 11, dispatch / vendor / device families: optional packages (``veomni.optional``, NPU308), requirement
probes (``veomni.probes``, NPU226), binding names (``veomni.bindnames``, NPU227)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni.optional import GUARDED, LAZY, TOP, import_sites, optional_in_tree
from npu_lint.veomni.project import load_project
from tests.rules.snippets import lint_in_tree, ops_tree


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    return ops_tree(tmp_path, files, pyproject="[project]\nname = 'veomni'\ndependencies = ['einops>=0.8']\n")


_lint_file = lint_in_tree


# -- veomni.optional and NPU308 ----------------------------------------------------------------------------

_LAZY_KERNEL = """
import torch


def blend_fast(x):
    from blendkit.ops import blend

    return blend(x)
"""

_REGISTRY = """
{extra}
from ...kernel_registry import KERNEL_REGISTRY, KernelSpec


def _blend_factory():
    from .fast import blend_fast

    return blend_fast
"""


def test_import_sites_kinds() -> None:
    import ast

    tree = ast.parse(
        textwrap.dedent(
            """
            import alpha
            try:
                import beta
            except ImportError:
                beta = None
            if is_gamma_available():
                import gamma
            def f():
                import delta
            """
        )
    )
    kinds = {pkg: how for _stmt, pkg, how in import_sites(tree)}
    assert kinds == {"alpha": TOP, "beta": GUARDED, "gamma": GUARDED, "delta": LAZY}


def test_registry_hoisting_a_lazily_imported_package(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "veomni/ops/kernels/blend/fast.py": _LAZY_KERNEL,
            "veomni/ops/kernels/blend/__init__.py": _REGISTRY.format(extra="import blendkit  # noqa: F401"),
        },
    )
    diags = _lint_file(root, "veomni/ops/kernels/blend/__init__.py", ["NPU308"])
    assert [(d.code, d.line) for d in diags] == [("NPU308", 1)]
    assert "e.g. in veomni/ops/kernels/blend/fast.py" in diags[0].message
    project = load_project([str(root / "veomni/ops/kernels/blend/__init__.py")])
    assert [(s.path, s.line, s.how) for s in project.import_sites["blendkit"]] == [
        ("veomni/ops/kernels/blend/__init__.py", 1, TOP),
        ("veomni/ops/kernels/blend/fast.py", 5, LAZY),
    ]
    assert (
        optional_in_tree(project, "blendkit", str(root / "veomni/ops/kernels/blend/__init__.py")) is not None
    )


def test_registry_import_of_a_package_loaded_elsewhere_is_quiet(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "veomni/ops/kernels/blend/fast.py": _LAZY_KERNEL,
            "veomni/utils/mix.py": "import blendkit\n",  # another module needs it when it loads
            "veomni/ops/kernels/blend/__init__.py": _REGISTRY.format(extra="import blendkit  # noqa: F401"),
        },
    )
    assert _lint_file(root, "veomni/ops/kernels/blend/__init__.py", ["NPU308"]) == []


def test_registry_import_of_a_required_package_is_quiet(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "veomni/ops/kernels/blend/fast.py": "def f():\n    import einops\n",
            "veomni/ops/kernels/blend/__init__.py": _REGISTRY.format(extra="import einops  # noqa: F401"),
        },
    )
    assert _lint_file(root, "veomni/ops/kernels/blend/__init__.py", ["NPU308"]) == []


def test_guarded_in_file_but_required_by_another_module_is_quiet(tmp_path: Path) -> None:
    guarded = """
    import blendkit

    try:
        from blendkit import NewApi
    except ImportError:
        NewApi = None
    """
    root = _tree(tmp_path, {"veomni/utils/compat.py": guarded, "veomni/utils/other.py": "import blendkit\n"})
    assert _lint_file(root, "veomni/utils/compat.py", ["NPU308"]) == []
    (root / "veomni/utils/other.py").write_text("def f():\n    import blendkit\n")
    diags = _lint_file(root, "veomni/utils/compat.py", ["NPU308"])
    assert [(d.code, d.line) for d in diags] == [("NPU308", 1)]


# -- veomni.bindnames and NPU227 ---------------------------------------------------------------------------


def _lint_text(path: str, text: str, codes: list[str]) -> list:
    return lint_source(SourceFile.from_text(path, textwrap.dedent(text).lstrip()), codes, Settings())


_GEN = "veomni/models/transformers/toy/generated/patched_modeling_toy_gpu.py"


def test_npu227_variant_named_by_the_binding() -> None:
    text = """
    from veomni.ops.dispatch import OpSlot

    veomni_causal_lm_loss = OpSlot("cross_entropy_loss", "seq_cls")
    veomni_partial_rotary = OpSlot("rotary_pos_emb", "full")
    """
    diags = _lint_text(_GEN, text, ["NPU227"])
    assert [(d.line, d.message.split("`")[3]) for d in diags] == [(3, "causal"), (4, "partial")]


def test_npu227_instance_handle_and_quiet_names() -> None:
    text = """
    from veomni.ops import VeomniOp


    class ToyRMSNorm:
        def __init__(self, impl):
            self.veomni_rms_norm_offset = VeomniOp("rms_norm", "standard", impl)
            self.veomni_rms_norm = VeomniOp("rms_norm", "offset", impl)
            self.veomni_norm = VeomniOp("rms_norm", "unweighted", impl)
            self.veomni_rope_full = VeomniOp("rope", "full", impl)
    """
    diags = _lint_text("veomni/models_kernel/transformers/toy/modeling_toy.py", text, ["NPU227"])
    assert [(d.line, d.message.split("`")[3]) for d in diags] == [(6, "offset")]


def test_npu227_config_field_and_ambiguous_names() -> None:
    text = '''
    from veomni.patchgen.patch_spec import PatchConfig

    config = PatchConfig(source_module="transformers.models.toy.modeling_toy", target_file="x.py")
    config.add_post_import_block(
        """
        from veomni.ops.dispatch import OpsConfigSlot
        veomni_rms_norm_implementation = OpsConfigSlot("swiglu_mlp_implementation")
        veomni_rms_norm_gated_implementation = OpsConfigSlot("rms_norm_gated_implementation")
        veomni_norm_choice = OpsConfigSlot("rms_norm_implementation")
        """
    )
    '''
    diags = _lint_text("veomni/models/transformers/toy/toy_npu_patch_gen_config.py", text, ["NPU227"])
    assert [(d.line, d.message.split("`")[3]) for d in diags] == [(7, "rms_norm_implementation")]


# -- veomni.probes and NPU226 ------------------------------------------------------------------------------

_IMPORT_UTILS = """
import importlib.util

_PACKAGE_FLAGS = {
    "blend_npu": importlib.util.find_spec("blend_npu") is not None,
    "fastmix": importlib.util.find_spec("fastmix") is not None,
}


def is_mixer_available() -> bool:
    return _PACKAGE_FLAGS["fastmix"]


def is_blend_npu_available() -> bool:
    return _PACKAGE_FLAGS["blend_npu"]
"""

_CHECK = """
from veomni.utils.import_utils import is_blend_npu_available, is_mixer_available


def check(requires):
    for pkg in requires:
        if pkg == "fastmix":
            if not {fastmix}():
                raise RuntimeError("fastmix missing")
        elif pkg == "blend_npu":
            if not {blend}():
                raise RuntimeError("blend_npu missing")
"""


def test_npu226_reads_helpers_by_their_bodies(tmp_path: Path) -> None:
    # ``is_mixer_available`` is named for no package: its body says it tests ``fastmix``
    files = {
        "veomni/utils/__init__.py": "",
        "veomni/utils/import_utils.py": _IMPORT_UTILS,
        "veomni/ops/config/__init__.py": "",
        "veomni/ops/config/check.py": _CHECK.format(
            fastmix="is_mixer_available", blend="is_blend_npu_available"
        ),
    }
    root = _tree(tmp_path, files)
    assert _lint_file(root, "veomni/ops/config/check.py", ["NPU226"]) == []
    (root / "veomni/ops/config/check.py").write_text(
        textwrap.dedent(_CHECK.format(fastmix="is_mixer_available", blend="is_mixer_available")).lstrip()
    )
    diags = _lint_file(root, "veomni/ops/config/check.py", ["NPU226"])
    assert [(d.line, "`fastmix`" in d.message) for d in diags] == [(10, True)]


def test_npu226_device_dispatch_inside_a_backend_is_not_a_check() -> None:
    text = """
    from veomni.utils.device import IS_NPU_AVAILABLE


    def pick(impl):
        if impl == "triton":
            if IS_NPU_AVAILABLE:
                from .ascend import kernel
            else:
                from .cuda import kernel
            return kernel
        if impl == "npu" and not IS_NPU_AVAILABLE:
            raise RuntimeError("npu backend on a host without an NPU")
        return None
    """
    assert _lint_text("veomni/ops/kernels/toy/__init__.py", text, ["NPU226"]) == []


def test_npu226_conjunction_probe() -> None:
    text = """
    from veomni.utils.import_utils import is_package_available


    def validate(impl):
        if impl == "triton" and not is_package_available("liger_kernel"):
            raise ValueError("triton is not installed")
    """
    diags = _lint_text("veomni/arguments/toy_args.py", text, ["NPU226"])
    assert [(d.line, "`liger_kernel`" in d.message) for d in diags] == [(5, True)]


# -- device family: a helper of a CUDA kernel package written device-neutral ---------------------------------


def test_neutral_helper_in_a_cuda_kernel_package(tmp_path: Path) -> None:
    bench = """
    import torch

    {imports}


    def time_it(f):
        start = torch.cuda.Event(enable_timing=True)
        start.record()
        f()
        return start
    """
    root = _tree(
        tmp_path,
        {
            "veomni/utils/__init__.py": "",
            "veomni/utils/device.py": "def get_torch_device():\n    return None\n",
            "veomni/ops/kernels/gemm/_kernels/__init__.py": "",
            "veomni/ops/kernels/gemm/_kernels/tune.py": "import triton\n",
            "veomni/ops/kernels/gemm/_kernels/bench.py": bench.format(imports=""),
        },
    )
    assert _lint_file(root, "veomni/ops/kernels/gemm/_kernels/bench.py", ["NPU102"]) == []
    helper = "from ....utils.device import get_torch_device, synchronize  # noqa: F401"
    (root / "veomni/ops/kernels/gemm/_kernels/bench.py").write_text(
        textwrap.dedent(bench.format(imports=helper)).lstrip()
    )
    diags = _lint_file(root, "veomni/ops/kernels/gemm/_kernels/bench.py", ["NPU102"])
    assert [(d.code, d.line) for d in diags] == [("NPU102", 7)]


def test_npu103_value_moved_to_its_own_buffers_device() -> None:
    text = """
    import torch
    from torch import nn


    class ToyRotary(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.register_buffer("inv_freq", torch.ones(dim // 2), persistent=False)

        def forward(self, x, position_ids):
            freqs = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1).to(self.inv_freq.device)
            ok = self.inv_freq[None, :, None].float().to(x.device)
            other = self.inv_freq.to(self.scale.device)
            return freqs, ok, other
    """
    diags = _lint_text("veomni/models/transformers/toy/modeling_toy.py", text, ["NPU103"])
    assert [(d.line, d.message.startswith("`.to(self.inv_freq.device)`")) for d in diags] == [(11, True)]


def test_npu226_exclusion_of_another_host_is_not_a_requirement_check() -> None:
    text = """
    from veomni.utils.import_utils import is_quack_available, is_torch_npu_available


    def bind(kernel):
        if kernel == "quack":
            if is_torch_npu_available():
                raise RuntimeError("quack is GPU-only")
            if not is_quack_available():
                raise RuntimeError("quack is missing")
        elif kernel == "triton":
            if not is_torch_npu_available():
                raise RuntimeError("triton needs ...")
    """
    diags = _lint_text("veomni/ops/kernels/toy_moe/__init__.py", text, ["NPU226"])
    assert [(d.line, "`torch_npu`" in d.message) for d in diags] == [(11, True)]


def test_npu227_replacement_of_another_target() -> None:
    from npu_lint.veomni.bindnames import replacement_stem

    assert replacement_stem("apply_rotary_pos_emb_npu_patched") == "apply_rotary_pos_emb"
    text = """
    from veomni.patchgen.patch_spec import PatchConfig

    config = PatchConfig(source_module="transformers.models.toy.modeling_toy", target_file="x.py")
    config.replace_function("apply_rotary_pos_emb", replacement=rope_patched)
    config.replace_function("apply_rotary_pos_emb_vision", replacement=apply_rotary_pos_emb_patched)
    config.replace_function("rotate_half", replacement=apply_rotary_pos_emb_patched)
    config.replace_function("eager_attention_forward", replacement=rope_patched)
    config.replace_function("rope", replacement=rope_patched)
    """
    diags = _lint_text("veomni/models/transformers/toy/toy_npu_patch_gen_config.py", text, ["NPU227"])
    # `apply_rotary_pos_emb` is not given `apply_rotary_pos_emb_patched`: nothing is shared; `rope_patched` is
    # `rope`'s replacement, also given to two other targets
    assert [(d.line, d.message.split("`")[1]) for d in diags] == [
        (4, "apply_rotary_pos_emb"),
        (7, "eager_attention_forward"),
    ]
