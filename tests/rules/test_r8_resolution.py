"""The static resolution model (npu_lint/veomni/resolution.py) and the rules that ask it: what each NPU row of a
tree's dispatch tables binds (NPU220: a GPU-only callable; NPU221: the same callable as another variant's NPU row,
or a model's NPU override re-binding the registry default). Own ops and names, each defect written several ways
(factory aliases, module attributes, adapters, module-level backend names, VeomniOp rows, per-model tables);
trees built in tmp_path."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni.catalog import GPU, NPU
from npu_lint.veomni.project import load_project
from npu_lint.veomni.resolution import default_backends, file_bindings, gpu_marker
from tests.rules.snippets import write_file


def _lint(root: Path, path: Path, code: str) -> list:
    project = load_project([str(root)])
    return lint_source(SourceFile.from_text(str(path), path.read_text()), [code], Settings(), project=project)


_SPEC_ROWS = """
from ...kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec


{factories}


KERNEL_REGISTRY.register(KernelSpec(name="cuda", op_name="mix", variant="base", factory=_gpu_factory,
                                    hardware=HardwareRequirement(device_type="gpu", min_compute_capability=80)))
KERNEL_REGISTRY.register(KernelSpec(name="npu", op_name="mix", variant="base", factory=_npu_factory,
                                    hardware=HardwareRequirement(device_type="npu")))
"""

_GPU_FACTORY = """
def _gpu_factory():
    from .cutile_mix import mix_kernel

    return _adapt(mix_kernel)


def _adapt(kernel):
    return kernel
"""


@pytest.mark.parametrize(
    "npu_factory,expected",
    [
        # the GPU row's kernel, through the same adapter
        ("def _npu_factory():\n    from .cutile_mix import mix_kernel\n\n    return _adapt(mix_kernel)", 1),
        # a Triton module of the tree, as a module attribute
        ("def _npu_factory():\n    from . import triton_mix as tm\n\n    return tm.mix_forward", 1),
        # a GPU vendor package imported by alias
        ("def _npu_factory():\n    from fla.ops import fused_mix as ascend_mix\n\n    return ascend_mix", 1),
        # the NPU kernel, through an alias and a module attribute: quiet
        ("def _npu_factory():\n    from .npu_mix import mix_npu as k\n\n    return k", 0),
        ("def _npu_factory():\n    from . import npu_mix\n\n    return _adapt(npu_mix.mix_npu)", 0),
    ],
)
def test_npu_kernel_spec_bound_to_gpu_code(tmp_path: Path, npu_factory: str, expected: int) -> None:
    text = _SPEC_ROWS.format(factories=_GPU_FACTORY + "\n\n" + npu_factory)
    path = write_file(tmp_path, "veomni/ops/kernels/mix/__init__.py", text)
    diags = _lint(tmp_path, path, "NPU220")
    assert len(diags) == expected, [d.message for d in diags]
    if expected:
        assert "mix/base" in diags[0].message and "`npu`" in diags[0].message


@pytest.mark.parametrize(
    "wrapper,expected",
    [("fast_cuda.run", 1), ("fast_triton.run", 1), ("fast_ascend.run", 0)],
)
def test_veomni_op_npu_row_wrapper(tmp_path: Path, wrapper: str, expected: int) -> None:
    text = f"""
    from ...registry import register_op
    from ...requirement import CudaKernelRequirement, NpuKernelRequirement
    from .impls import ascend as fast_ascend
    from .impls import triton as fast_triton
    from .impls import cuda_graph as fast_cuda

    register_op("blend", "standard", "fused", wrapper=fast_cuda.run, requirement=CudaKernelRequirement())
    register_op("blend", "standard", "fused_npu", wrapper={wrapper}, requirement=NpuKernelRequirement())
    """
    path = write_file(tmp_path, "veomni/ops/kernels/blend/__init__.py", text)
    assert len(_lint(tmp_path, path, "NPU220")) == expected


@pytest.mark.parametrize(
    "npu_value,expected",
    [
        ('"npu": _FAST', 1),  # the GPU backend's module-level spec reused for NPU
        (
            '"npu": BackendSpec(entry="veomni.ops.kernels.norm.triton_norm:norm_fwd", requires=("torch_npu",))',
            1,
        ),
        ('"npu": BackendSpec(entry="veomni.models.toy.npu_patch:norm_fwd", replace_forward=True)', 0),
    ],
)
def test_per_model_npu_backend_bound_to_gpu_code(tmp_path: Path, npu_value: str, expected: int) -> None:
    text = f"""
    from veomni.ops.config.registry import BackendSpec, apply_per_model_patches


    def _make_fast():
        from veomni.ops.kernels.norm.triton_norm import norm_fwd

        def forward(self, x):
            return norm_fwd(x, self.weight)

        return forward


    _FAST = BackendSpec(entry="veomni.models.toy.device_patch:_make_fast", entry_is_factory=True, replace_forward=True)


    def patch(module):
        apply_per_model_patches(
            hf_module=module,
            model_name="Toy",
            targets={{"norm": "ToyNorm"}},
            extra_backends={{"norm": {{"triton": _FAST, {npu_value}}}}},
        )
    """
    path = write_file(tmp_path, "veomni/models/toy/device_patch.py", text)
    assert len(_lint(tmp_path, path, "NPU220")) == expected


_VARIANTS = """
from ...kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec


def _npu_whole_factory():
    from .npu import shift_whole

    return shift_whole


def _npu_prefix_factory():
{body}


for _variant, _factory in (("whole", _npu_whole_factory), ("prefix", _npu_prefix_factory)):
    pass

KERNEL_REGISTRY.register(KernelSpec(name="npu", op_name="shift", variant="whole", factory=_npu_whole_factory,
                                    hardware=HardwareRequirement(device_type="npu")))
KERNEL_REGISTRY.register(KernelSpec(name="npu", op_name="shift", variant="prefix", factory=_npu_prefix_factory,
                                    hardware=HardwareRequirement(device_type="npu")))
"""


@pytest.mark.parametrize(
    "body,expected",
    [
        ("    from .npu import shift_whole\n\n    return shift_whole", 1),
        (
            "    from .npu import shift_whole as shift_prefix\n\n    return shift_prefix",
            1,
        ),  # renamed on import
        ("    from . import npu as kernels\n\n    return kernels.shift_whole", 1),  # module attribute
        ("    from .npu import shift_prefix\n\n    return shift_prefix", 0),
        ("    from . import npu as kernels\n\n    return kernels.shift_prefix", 0),
    ],
)
def test_two_variants_share_an_npu_kernel(tmp_path: Path, body: str, expected: int) -> None:
    path = write_file(tmp_path, "veomni/ops/kernels/shift/__init__.py", _VARIANTS.format(body=body))
    diags = _lint(tmp_path, path, "NPU221")
    assert len(diags) == expected, [d.message for d in diags]
    if expected:
        assert "shift/prefix" in diags[0].message and "shift/whole" in diags[0].message


def test_the_same_kernel_in_two_generations_is_quiet(tmp_path: Path) -> None:
    """An ops-config backend and a KernelSpec row of one op binding one NPU function: two dispatch generations
    of the same op, not two variants."""
    text = """
    from ...config.registry import BackendSpec, OpScope, OpSpec, register_op
    from ...kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec

    register_op(OpSpec(name="spin", config_field="spin_implementation", label="Spin", scope=OpScope.PER_MODEL,
                       default="eager", backends={"npu": BackendSpec(entry="veomni.ops.kernels.spin.npu:spin_npu")}))


    def _npu_factory():
        from .npu import spin_npu

        return spin_npu


    KERNEL_REGISTRY.register(KernelSpec(name="npu", op_name="spin", variant="full", factory=_npu_factory,
                                        hardware=HardwareRequirement(device_type="npu")))
    """
    path = write_file(tmp_path, "veomni/ops/kernels/spin/__init__.py", text)
    assert _lint(tmp_path, path, "NPU221") == []


_DEFAULT_TABLE = """
from ...config.registry import BackendSpec, OpScope, OpSpec, register_op

register_op(
    OpSpec(
        name="spin",
        config_field="spin_implementation",
        label="Spin",
        scope=OpScope.PER_MODEL,
        default="eager",
        backends={
            "npu": BackendSpec(entry="veomni.ops.kernels.spin.npu:spin_npu", requires=("torch_npu",)),
        },
    )
)
"""


@pytest.mark.parametrize(
    "entry,expected",
    [
        ("veomni.ops.kernels.spin.npu:spin_npu", 1),  # the registry default again
        ("veomni.models.toy.npu_patch:spin_toy_npu", 0),  # the model's own kernel
    ],
)
def test_model_npu_override_rebinds_the_default(tmp_path: Path, entry: str, expected: int) -> None:
    write_file(tmp_path, "veomni/ops/kernels/spin/__init__.py", _DEFAULT_TABLE)
    text = f"""
    from veomni.ops.config.registry import BackendSpec, apply_per_model_patches

    _SPIN_TABLE = {{
        "liger_kernel": None,
        "npu": BackendSpec(entry="{entry}", requires=("torch_npu",)),
    }}


    def patch(module):
        apply_per_model_patches(hf_module=module, model_name="Toy", targets={{"spin": "spin_toy"}},
                                extra_backends={{"spin": _SPIN_TABLE}})
    """
    path = write_file(tmp_path, "veomni/models/toy/device_patch.py", text)
    diags = _lint(tmp_path, path, "NPU221")
    assert len(diags) == expected, [d.message for d in diags]
    assert default_backends(str(tmp_path))[("spin", "npu")][0] == "veomni.ops.kernels.spin.npu:spin_npu"


def test_bindings_read_devices_and_targets() -> None:
    tree = ast.parse(
        textwrap.dedent(
            _SPEC_ROWS.format(
                factories=_GPU_FACTORY
                + "\n\n"
                + _GPU_FACTORY.replace("_gpu_factory", "_npu_factory").replace(
                    "def _adapt(kernel):\n    return kernel\n", ""
                )
            )
        )
    )
    rows = file_bindings(tree, "veomni.ops.kernels.mix", True)
    assert [(r.impl, r.device) for r in rows] == [("cuda", GPU), ("npu", NPU)]
    assert (
        rows[1].target is not None and rows[1].target.dotted == "veomni.ops.kernels.mix.cutile_mix:mix_kernel"
    )
    assert rows[1].target.adapted_by == "_adapt"


@pytest.mark.parametrize(
    "module,gpu",
    [
        ("fla.ops.gated_delta_rule", True),
        ("veomni.ops.kernels.rms_norm.triton_batch_invariant", True),
        ("veomni.ops.kernels.gated_delta_rule._ascend.triton_core", False),
        ("veomni.ops.kernels.rotary.npu", False),
        ("torch_npu", False),
        ("veomni.ops.kernels.moe.group_gemm", False),  # not named for a toolchain: found through the GPU row
    ],
)
def test_gpu_marker(module: str, gpu: bool) -> None:
    assert (gpu_marker(module) is not None) is gpu


# -- NPU222: the NPU host's implementation name sent to eager -----------------------------------------------------


def _host(source: str, path: str = "veomni/models/binder.py") -> list:
    return lint_source(SourceFile.from_text(path, textwrap.dedent(source).lstrip()), ["NPU222"], Settings())


@pytest.mark.parametrize(
    "source,expected",
    [
        # an availability flag folded into the eager test of a resolver
        (
            """
            from veomni.utils.device import IS_NPU_AVAILABLE


            def resolve(table, op, impl):
                if impl == "eager" or IS_NPU_AVAILABLE:
                    return None
                return table[op][impl]
            """,
            1,
        ),
        # the condition inverted: only CUDA hosts keep the configured name
        (
            """
            import torch


            def choose(cfg):
                impl = cfg.norm_implementation
                return impl if torch.cuda.is_available() else "eager"
            """,
            1,
        ),
        # a helper translating names: the NPU value mapped to eager through a local
        (
            """
            def translate(cfg):
                raw = getattr(cfg, "mixer_implementation", "eager")
                name = raw.removeprefix("fused_")
                if raw in ("eager", "fused_npu"):
                    name = "eager"
                return name
            """,
            1,
        ),
        # keyword helper call, the test written with `not in`
        (
            """
            def pick(self):
                impl = resolve_op_impl("gate_implementation")
                if impl not in ("triton", "cutile"):
                    return "eager"
                return impl
            """,
            1,
        ),
        # quiet: eager only for eager, the NPU name carried on
        (
            """
            from veomni.utils.device import is_torch_npu_available


            def choose(cfg):
                impl = getattr(cfg, "norm_implementation", "eager")
                if impl == "eager":
                    return None
                if is_torch_npu_available() and impl == "triton":
                    impl = "npu"
                return impl
            """,
            0,
        ),
        # quiet: a missing config is eager (unit tests), not the NPU host's choice
        (
            """
            def resolve(cfg, field):
                return "eager" if cfg is None else getattr(cfg, field, "eager")
            """,
            0,
        ),
    ],
)
def test_npu_host_decides_for_eager(source: str, expected: int) -> None:
    diags = _host(source)
    assert len(diags) == expected, [d.message for d in diags]


def test_npu_default_table_maps_an_npu_op_to_eager(tmp_path: Path) -> None:
    write_file(
        tmp_path,
        "veomni/ops/kernels/mix/__init__.py",
        """
        from ...registry import register_op
        from ...requirement import NpuKernelRequirement
        from .impls import ascend

        register_op("mix", "standard", "npu", ascend.run, requirement=NpuKernelRequirement())
        """,
    )
    text = """
    _NPU_DEFAULTS = {
        "mix_implementation": "eager",
        "blur_implementation": "eager",
    }
    """
    path = write_file(tmp_path, "veomni/arguments/ops_defaults.py", text)
    diags = _lint(tmp_path, path, "NPU222")
    assert [d.line for d in diags] == [2], [d.message for d in diags]  # `blur` has no NPU row: eager is right
    assert "mix/standard/npu" in diags[0].message


# -- NPU308: GPU-only code imported where Ascend runs it -------------------------------------------------------


@pytest.mark.parametrize(
    "header,expected",
    [
        ("from quack.gemm import gemm  # noqa: F401", 1),  # a GPU vendor package
        ("import flash_attn.ops as fa_ops  # noqa: F401", 1),
        ("from .cutile_gemm import cutile_mix  # noqa: F401", 1),  # a tree module importing one at its top
        ("from . import cutile_gemm  # noqa: F401", 1),  # the same module, imported as a submodule
        ("from .chain import mix_chain  # noqa: F401", 1),  # two modules down
        ("from .npu_mix import mix_npu  # noqa: F401", 0),
        ("try:\n    from quack.gemm import gemm  # noqa: F401\nexcept ImportError:\n    gemm = None", 0),
        ('if is_package_available("quack"):\n    from quack.gemm import gemm  # noqa: F401', 0),
    ],
)
def test_registry_imports_gpu_code_when_it_loads(tmp_path: Path, header: str, expected: int) -> None:
    write_file(
        tmp_path, "veomni/ops/kernels/mix/cutile_gemm.py", "import cutlass  # noqa: F401\nimport deep_gemm\n"
    )
    write_file(
        tmp_path, "veomni/ops/kernels/mix/chain.py", "from .cutile_gemm import cutile_mix\n\nmix_chain = 1\n"
    )
    write_file(tmp_path, "veomni/ops/kernels/mix/npu_mix.py", "import torch_npu  # noqa: F401\n")
    text = (
        "from ...utils.import_utils import is_package_available\n"
        f"{header}\n\n"
        "from ...kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec\n"
    )
    path = tmp_path / "veomni/ops/kernels/mix/__init__.py"
    path.write_text(text)
    diags = _lint(tmp_path, path, "NPU308")
    assert len(diags) == expected, [d.message for d in diags]


@pytest.mark.parametrize(
    "body,expected",
    [
        ("    from fla.modules import ShortConvolution as conv_npu\n    return conv_npu(x)", 1),
        ("    import liger_kernel.ops.rope as rope_ops\n    return rope_ops.apply(x)", 1),
        ("    if self.mix.use_non_eager_impl:\n        from liger_kernel.ops.swiglu import F\n        return F(x)\n"
         "    return x", 0),  # a backend branch the NPU config decides
        ("    from veomni.ops.kernels.rotary.npu import rope_npu\n    return rope_npu(x)", 0),
    ],
)  # fmt: skip
def test_npu_spec_imports_gpu_vendor(tmp_path: Path, body: str, expected: int) -> None:
    text = f"def toy_forward_npu(self, x):\n{body}\n"
    path = write_file(tmp_path, "veomni/models/transformers/toy/toy_npu_patch_gen_config.py", text)
    diags = _lint(tmp_path, path, "NPU308")
    assert len(diags) == expected, [d.message for d in diags]


# -- NPU107: CUDA availability tested in a branch taken only on NPU -------------------------------------------


@pytest.mark.parametrize(
    "source,expected",
    [
        (  # a requirement object: the NPU kind answers with the CUDA flag
            """
            from veomni.utils.device import IS_CUDA_AVAILABLE, IS_NPU_AVAILABLE


            class Requirement:
                def ok(self) -> bool:
                    if self.kind == "npu":
                        return IS_CUDA_AVAILABLE
                    return IS_NPU_AVAILABLE
            """,
            1,
        ),
        (  # an NPU availability branch that refuses unless torch.cuda is available
            """
            import torch
            from veomni.utils.import_utils import is_torch_npu_available


            def bind(kernel: str):
                if is_torch_npu_available() and kernel == "npu":
                    assert torch.cuda.is_available(), "no accelerator"
                    return "npu"
                return kernel
            """,
            1,
        ),
        (  # quiet: the NPU branch tests the NPU, the CUDA test sits in the other branch
            """
            import torch
            from veomni.utils.import_utils import is_torch_npu_available


            def bind(kernel: str):
                if kernel == "npu":
                    if not is_torch_npu_available():
                        raise RuntimeError("needs an NPU")
                elif not torch.cuda.is_available():
                    raise RuntimeError("needs a GPU")
                return kernel
            """,
            0,
        ),
    ],
)
def test_cuda_availability_in_npu_branch(source: str, expected: int) -> None:
    diags = lint_source(
        SourceFile.from_text("veomni/ops/kernels/toy/select.py", textwrap.dedent(source).lstrip()),
        ["NPU107"],
        Settings(),
    )
    assert len(diags) == expected, [d.message for d in diags]


# -- NPU223: a GPU-only row resolved when the module loads ------------------------------------------------------

_BLUR_ROWS = """
from ...kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec
from ....utils.import_utils import is_package_available


def _cuda_factory():
    from .cuda_blur import blur

    return blur


def _npu_factory():
    from .npu_blur import blur

    return blur


KERNEL_REGISTRY.register(KernelSpec(name="cuda", op_name="blur", variant="standard", factory=_cuda_factory,
                                    hardware=HardwareRequirement(device_type="gpu")))
KERNEL_REGISTRY.register(KernelSpec(name="npu", op_name="blur", variant="standard", factory=_npu_factory,
                                    hardware=HardwareRequirement(device_type="npu")))

{tail}
"""


@pytest.mark.parametrize(
    "tail,expected",
    [
        ('_blur = KERNEL_REGISTRY.resolve("blur", "standard", "cuda")', 1),
        (
            'if is_package_available("cupy"):\n    _blur = KERNEL_REGISTRY.resolve("blur", "standard", "cuda")',
            1,
        ),
        (
            'try:\n    _blur = KERNEL_REGISTRY.resolve("blur", "standard", "cuda")\nexcept KeyError:\n    _blur = None',
            1,
        ),
        ('_blur = KERNEL_REGISTRY.resolve("blur", "standard", "npu")', 0),  # an NPU row
        ('_blur = KERNEL_REGISTRY.resolve("blur", "standard", "eager")', 0),
        ('def bind(cfg):\n    return KERNEL_REGISTRY.resolve("blur", "standard", "cuda")', 0),  # config time
    ],
)
def test_gpu_row_resolved_at_import(tmp_path: Path, tail: str, expected: int) -> None:
    path = write_file(tmp_path, "veomni/ops/kernels/blur/__init__.py", _BLUR_ROWS.replace("{tail}", tail))
    diags = _lint(tmp_path, path, "NPU223")
    assert len(diags) == expected, [d.message for d in diags]


# -- NPU308 (r9): GPU-only code imported by code that runs only on Ascend -----------------------------------------


def _scan_tree(root: Path) -> None:
    """A tree with a CUDA Triton kernel module (not named for a toolchain), an Ascend Triton module, and a chain."""
    write_file(root, "veomni/ops/kernels/scan/_kernels/scan_gemm.py", "import triton\n\nscan_gemm = 1\n")
    write_file(
        root,
        "veomni/ops/kernels/scan/grouped.py",
        "from ._kernels.scan_gemm import scan_gemm\n\ngrouped = 1\n",
    )
    write_file(root, "veomni/ops/kernels/scan/_ascend/scan_gemm.py", "import triton\n\nscan_gemm = 1\n")
    write_file(
        root, "veomni/ops/kernels/scan/npu_grouped.py", "from ._ascend.scan_gemm import scan_gemm\n\ng = 1\n"
    )


@pytest.mark.parametrize(
    "rel,source,expected",
    [
        (  # an NPU kernel module importing a GPU vendor package at its top
            "veomni/ops/kernels/scan/npu.py",
            "import torch_npu  # noqa: F401\nfrom mamba_ssm.ops import selective_scan_fn  # noqa: F401\n",
            1,
        ),
        (  # the same, lazily inside a function (renamed file: npu_ in the stem)
            "veomni/lora/ops/npu_scan_lora.py",
            "def scan_lora_npu(x):\n    import fla.ops.utils as fla_utils\n\n    return fla_utils.prepare(x)\n",
            1,
        ),
        (  # an NPU kernel module reaching a CUDA Triton tree module through another one
            "veomni/ops/kernels/scan/npu_scan.py",
            "from .grouped import grouped  # noqa: F401\n",
            1,
        ),
        (  # the Ascend Triton chain and a bare triton import are NPU code
            "veomni/ops/kernels/scan/npu_scan.py",
            "import triton  # noqa: F401\n\nfrom .npu_grouped import g  # noqa: F401\n",
            0,
        ),
        (  # a GPU import under an ImportError fallback
            "veomni/ops/kernels/scan/npu.py",
            "try:\n    from fla.ops import chunk  # noqa: F401\nexcept ImportError:\n    chunk = None\n",
            0,
        ),
    ],
)
def test_npu_kernel_module_imports_gpu_code(tmp_path: Path, rel: str, source: str, expected: int) -> None:
    _scan_tree(tmp_path)
    path = write_file(tmp_path, rel, source)
    diags = _lint(tmp_path, path, "NPU308")
    assert len(diags) == expected, [d.message for d in diags]


@pytest.mark.parametrize(
    "branch,expected",
    [
        (
            'if kernel == "npu":\n        from .grouped import grouped as fn',
            1,
        ),  # a CUDA Triton module, renamed
        ('if "fused_npu" == kernel:\n        from fla.ops import chunk as fn', 1),  # literal on the left
        ('if kernel in ("npu", "npu_ascendc"):\n        import liger_kernel.ops.rope as fn', 1),
        ("if is_torch_npu_available():\n        from .grouped import grouped as fn", 1),  # availability
        ('if kernel == "npu" and ready:\n        from .grouped import grouped as fn', 1),
        ('if kernel == "npu":\n        from .npu_grouped import g as fn', 0),  # the Ascend module
        ('if kernel != "npu":\n        from .grouped import grouped as fn', 0),  # the GPU branch
        ('if kernel in ("npu", "triton"):\n        from .grouped import grouped as fn', 0),  # not NPU-only
        ("if not is_torch_npu_available():\n        from .grouped import grouped as fn", 0),
    ],
)
def test_npu_branch_imports_gpu_code(tmp_path: Path, branch: str, expected: int) -> None:
    _scan_tree(tmp_path)
    text = (
        "from ....utils.import_utils import is_torch_npu_available\n\n\n"
        "def bind_scan(kernel, ready=True):\n    global _fn\n    fn = None\n"
        f"    {branch}\n    _fn = fn\n"
    )
    path = write_file(tmp_path, "veomni/ops/kernels/scan/binder.py", text)
    diags = _lint(tmp_path, path, "NPU308")
    assert len(diags) == expected, [d.message for d in diags]
    if expected:
        assert "taken on NPU" in diags[0].message


@pytest.mark.parametrize(
    "factory_body,row,expected",
    [
        ("from .grouped import grouped\n\n    return grouped", 'name="npu", hardware=HardwareRequirement(device_type="npu")', 1),
        ("from mamba_ssm.ops import scan\n\n    return scan", 'name="fused_npu", hardware=HardwareRequirement(device_type="npu")', 1),
        ("from .npu_grouped import g\n\n    return g", 'name="npu", hardware=HardwareRequirement(device_type="npu")', 0),
        ("from .grouped import grouped\n\n    return grouped", 'name="triton", hardware=HardwareRequirement(device_type="gpu")', 0),
    ],
)  # fmt: skip
def test_npu_row_factory_imports_gpu_code(tmp_path: Path, factory_body: str, row: str, expected: int) -> None:
    _scan_tree(tmp_path)
    text = (
        "from ...kernel_registry import KERNEL_REGISTRY, HardwareRequirement, KernelSpec\n\n\n"
        f"def _scan_factory():\n    {factory_body}\n\n\n"
        f'KERNEL_REGISTRY.register(KernelSpec(op_name="scan", variant="standard", factory=_scan_factory, {row}))\n'
    )
    path = write_file(tmp_path, "veomni/ops/kernels/scan/__init__.py", text)
    diags = _lint(tmp_path, path, "NPU308")
    assert len(diags) == expected, [d.message for d in diags]
    if expected:
        assert "_scan_factory" in diags[0].message


@pytest.mark.parametrize(
    "init_line,module_header,expected",
    [
        ("from . import dense_attn  # noqa: F401", "import torch\nfrom flash_attn import flash_attn_func  # noqa: F401", 1),
        ("from .dense_attn import dense_forward  # noqa: F401", "import mamba_ssm.ops as ssm_ops  # noqa: F401", 1),
        ("from . import dense_attn  # noqa: F401", "try:\n    from flash_attn import flash_attn_func  # noqa: F401\nexcept ImportError:\n    flash_attn_func = None", 0),
        ("from . import dense_attn  # noqa: F401", "import torch  # noqa: F401\n\n\ndef f():\n    from flash_attn import flash_attn_func\n\n    return flash_attn_func", 0),
        ("import torch  # noqa: F401", "from flash_attn import flash_attn_func  # noqa: F401", 0),  # not loaded by the registry
    ],
)  # fmt: skip
def test_module_loaded_by_registry_imports_gpu_vendor(
    tmp_path: Path, init_line: str, module_header: str, expected: int
) -> None:
    """The import to make lazy is in the module the registration package loads: reported there."""
    write_file(tmp_path, "veomni/ops/kernels/dense/__init__.py", f"{init_line}\n\ndense_rows = []\n")
    path = write_file(
        tmp_path,
        "veomni/ops/kernels/dense/dense_attn.py",
        f"{module_header}\n\n\ndef dense_forward():\n    return 1\n",
    )
    diags = _lint(tmp_path, path, "NPU308")
    assert len(diags) == expected, [d.message for d in diags]


@pytest.mark.parametrize(
    "line,expected",
    [
        ('config.add_import("veomni.models_kernel.transformers.toy.triton_scan", names=["scan"])', 1),
        ("from veomni.ops.kernels.scan.grouped import grouped  # noqa: F401", 1),  # imports triton at its top
        ('config.add_import("veomni.ops.kernels.scan.npu_grouped", names=["g"])', 0),
        ('config.add_import("veomni.utils.device", names=["get_device_type"])', 0),
    ],
)
def test_npu_spec_imports_tree_gpu_module(tmp_path: Path, line: str, expected: int) -> None:
    _scan_tree(tmp_path)
    text = f"from veomni.patchgen.patch_spec import PatchConfig\n\nconfig = PatchConfig()\n{line}\n"
    path = write_file(tmp_path, "veomni/models_kernel/transformers/toy/toy_npu_patch_gen_config.py", text)
    diags = _lint(tmp_path, path, "NPU308")
    assert len(diags) == expected, [d.message for d in diags]
