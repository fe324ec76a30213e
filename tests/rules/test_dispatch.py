"""NPU201-206 beyond the documented examples: positions, scopes, per-step analysis, rows, fixes."""

from __future__ import annotations

import sys
import textwrap
import types

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.diagnostics import Applicability, Edit, Fix
from npu_lint.core.source import SourceFile
from npu_lint.engine import fix_source, lint_source
from npu_lint.veomni.catalog import ANY, NPU, OpRow
from npu_lint.veomni.project import VEOMNI_OP, Project

MODEL = "veomni/models/transformers/toy/modeling_toy.py"
GPU_SPEC = "veomni/models/transformers/toy/toy_gpu_patch_gen_config.py"
NPU_SPEC = "veomni/models/transformers/toy/toy_npu_patch_gen_config.py"
KERNEL = "veomni/ops/kernels/rope/npu.py"


def lint(
    code: str, codes: list[str], path: str = MODEL, project: object | None = None, fix_mode: bool = True
):
    src = SourceFile.from_text(path, textwrap.dedent(code).lstrip("\n"))
    return lint_source(src, codes, Settings(), project, fix_mode=fix_mode)


def fix(code: str, codes: list[str], path: str = MODEL, project: object | None = None) -> str:
    src = SourceFile.from_text(path, textwrap.dedent(code).lstrip("\n"))
    return fix_source(src, codes, Settings(), project, unsafe=True).text


def where(diags) -> list[tuple[int, int, int, int]]:
    return [(d.line, d.col, d.end_line, d.end_col) for d in diags]


# -- NPU201 -----------------------------------------------------------------------------------------

SPEC_WITH_BLOCK = '''
from veomni.patchgen.patch_spec import PatchConfig
from veomni.ops.dispatch import OpSlot

config = PatchConfig(source_module="transformers.models.toy.modeling_toy", target_file="patched_modeling_toy_gpu.py")

config.add_post_import_block(
    """
    # OpSlot declarations
    from veomni.ops.dispatch import OpSlot
    veomni_rms_norm = OpSlot("rms_norm", "standard")

    if True:
        veomni_rope = OpSlot("rotary_pos_emb", "full")

    def helper():
        return OpSlot("never", "flagged")
    """
)
config.add_post_import_block("veomni_loss = OpSlot('cross_entropy_loss', 'causal')")
veomni_moe = OpSlot("moe_experts", "standard")
veomni_rms_norm = None  # placeholder
'''


def test_post_import_block_positions() -> None:
    diags = lint(SPEC_WITH_BLOCK, ["NPU201"], GPU_SPEC)
    assert where(diags) == [
        (10, 22, 10, 52),  # inside the triple-quoted block (dedented by 4): the column of OpSlot( in the file
        (13, 22, 13, 54),  # nested under `if` in the block
        (19, 44, 19, 82),  # one-line block: columns count from after the opening quote
        (20, 13, 20, 46),  # the spec's own module scope
    ]
    lines = textwrap.dedent(SPEC_WITH_BLOCK).lstrip("\n").splitlines()
    for diag in diags:
        assert lines[diag.line - 1][diag.col :].startswith("OpSlot(")
    assert "post-import block" in diags[0].message
    assert '`OpSlot("rms_norm", "standard")`' in diags[0].message


def test_post_import_block_with_escapes_reports_at_the_string() -> None:
    code = """
    config.add_post_import_block("from veomni.ops.dispatch import OpSlot\\nslot = OpSlot('rms_norm', 'standard')")
    """
    diags = lint(code, ["NPU201"], GPU_SPEC)
    assert where(diags) == [(1, 29, 1, 29)]


def test_module_scope_variants() -> None:
    code = """
    from veomni.ops import VeomniOp, attention_op, resolve_op
    from veomni.ops.dispatch import OpSlot

    slot = OpSlot("rms_norm", "standard")
    fn = slot.bound_kernel()
    entry = resolve_op("rope", "full", "eager")
    attn = attention_op()
    try:
        rope = VeomniOp("rope", "full", "eager")
    except KeyError:
        rope = None


    class Holder:
        shared = VeomniOp("rms_norm", "standard", "eager")  # class body: import time too

        def __init__(self):
            self.own = VeomniOp("rms_norm", "standard", "eager")

    make = lambda: VeomniOp("rope", "full", "eager")  # noqa: E731
    """
    diags = lint(code, ["NPU201"])
    assert [d.line for d in diags] == [4, 5, 6, 7, 9, 15]
    assert "bound_kernel" in diags[1].message


def test_generated_file_is_reported_without_applicable_fix() -> None:
    code = """
    # AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
    from veomni.ops.dispatch import OpSlot

    veomni_rms_norm = OpSlot("rms_norm", "standard")
    """
    diags = lint(code, ["NPU201"], "veomni/models/transformers/toy/generated/patched_modeling_toy_gpu.py")
    assert len(diags) == 1 and (diags[0].fix is None or not diags[0].fix.is_applicable)


@pytest.fixture
def fake_codemod(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Install a stand-in for npu_lint.fixers.dispatch (the codemod helper's module)."""
    calls: list[tuple[str, int]] = []

    def build_migration_fix(source, project):  # noqa: ANN001, ANN202
        calls.append((source.path, 1))
        return Fix("Migrate to VeomniOp", (Edit(0, 0, "# migrated\n"),), Applicability.UNSAFE, (), "test")

    module = types.ModuleType("npu_lint.fixers.dispatch")
    module.build_migration_fix = build_migration_fix  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "npu_lint.fixers.dispatch", module)
    return calls


def test_migration_fix_attached_once_per_file(fake_codemod: list[tuple[str, int]]) -> None:
    code = """
    from veomni.ops.dispatch import OpSlot

    a = OpSlot("rms_norm", "standard")
    b = OpSlot("rotary_pos_emb", "full")


    def f(x):
        if a.use_non_eager_impl:
            return a(x)
        return x
    """
    diags = lint(code, ["NPU201", "NPU203"])
    assert [d.code for d in diags] == ["NPU201", "NPU201", "NPU203"]
    # every finding carries the migration (so a suppressed one never takes it away from the others); the engine
    # builds it once per file and the findings share it
    assert all(d.fix is not None and d.fix.edits for d in diags)
    assert len({d.fix for d in diags}) == 1
    assert len(fake_codemod) == 1


def test_plain_check_defers_the_migration(fake_codemod: list[tuple[str, int]]) -> None:
    diags = lint('from veomni.ops.dispatch import OpSlot\na = OpSlot("rms_norm", "standard")\n', ["NPU201"],
                 fix_mode=False)  # fmt: skip
    assert diags[0].fix is not None and diags[0].fix.deferred and not diags[0].fix.edits
    assert fake_codemod == []  # the codemod did not run


def test_migration_fix_for_a_block_gets_the_spec_call(fake_codemod: list[tuple[str, int]]) -> None:
    diags = lint(SPEC_WITH_BLOCK, ["NPU201"], GPU_SPEC)
    assert diags[0].fix is not None
    assert len(fake_codemod) == 1


def test_codemod_failure_is_an_internal_error_naming_the_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """One failure policy: a fixer that raises is reported as `internal error in NPUxxx ...` (exit 2)."""
    from npu_lint.engine import InternalError

    module = types.ModuleType("npu_lint.fixers.dispatch")

    def broken(source, project):  # noqa: ANN001, ANN202
        raise RuntimeError("boom")

    module.build_migration_fix = broken  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "npu_lint.fixers.dispatch", module)
    with pytest.raises(InternalError, match="internal error in NPU201 fix"):
        lint('from x import OpSlot\ns = OpSlot("rms_norm", "standard")\n', ["NPU201"])


# -- NPU202 -----------------------------------------------------------------------------------------


def test_handle_in_method_called_from_forward() -> None:
    code = """
    from veomni.ops import VeomniOp, attention_op


    class Attn:
        def __init__(self, config):
            self.attn = attention_op()  # fine

        def _rope(self, q):
            return VeomniOp("rope", "full", "eager")(q)

        def _init_weights(self, module):
            return VeomniOp("rms_norm", "standard", "eager")  # not per step

        def forward(self, q):
            attn = attention_op()
            return self._rope(q)
    """
    diags = lint(code, ["NPU202"])
    assert [d.line for d in diags] == [9, 15]
    assert "`_rope`, which runs every step" in diags[0].message


def test_spec_functions() -> None:
    code = """
    from veomni.ops import VeomniOp


    @config.override_method("ToyRMSNorm.__init__")
    def toy_init_patched(self, dim):
        self.rms = VeomniOp("rms_norm", "standard", "eager")


    @config.modify_init("ToyMLP")
    def toy_mlp_init(self, config):
        self.mlp = VeomniOp("swiglu_mlp", "standard", "eager")


    @config.override_method("ToyRMSNorm.forward")
    def toy_forward_patched(self, x):
        return VeomniOp("rms_norm", "standard", "eager")(x, self.weight)


    @config.replace_function("apply_rotary_pos_emb")
    def apply_rotary_pos_emb_patched(q, k, cos, sin):
        return VeomniOp("rope", "full", "eager")(q, k, cos, sin)


    def build(impl):
        return VeomniOp("rope", "full", impl)
    """
    diags = lint(code, ["NPU202"], GPU_SPEC)
    assert [d.line for d in diags] == [16, 21]


# -- NPU203 -----------------------------------------------------------------------------------------


def test_guard_forms() -> None:
    code = """
    from veomni.ops.dispatch import OpSlot

    slot = OpSlot("rms_norm", "standard")


    def a(x):
        if slot.use_non_eager_impl:
            y = slot(x)
        else:
            y = x
        return y


    def b(x):
        if not slot.use_eager_impl:
            raise RuntimeError("unbound")
        return x


    def c(x):
        if slot.is_bound:
            x = slot(x)  # no fallback: not reported
        return x


    def d(self):
        self.fn = slot.bound_kernel() or torch_fallback
        self.only = slot.bound_kernel()  # no fallback


    def e(x):
        return slot(x) if slot.use_non_eager_impl else x


    def f(x):
        if slot.bound_kernel() is not None:
            return slot(x)
        return x


    def g(sock):
        if sock.is_bound:  # not a dispatch handle
            return 1
        return 0
    """
    diags = lint(code, ["NPU203"])
    assert [d.line for d in diags] == [7, 15, 27, 32, 36]


def test_implementation_comparison_needs_a_handle_call() -> None:
    code = """
    from veomni.ops import VeomniOp

    veomni_loss = VeomniOp("cross_entropy_loss", "standard", "eager")


    class M:
        def __init__(self, config):
            self.rms = VeomniOp("rms_norm", "standard", config.ops_config.rms_norm_implementation)

        def forward(self, x, config):
            if config.ops_config.rms_norm_implementation == "liger_kernel":
                return self.rms(x, self.weight, eps=1e-6)
            if config._attn_implementation != "eager":  # HF's own switch, no handle call
                x = x * 2
            else:
                x = x * 3
            if resolve_op_impl("cross_entropy_loss_implementation") in ("chunk_loss", "liger_kernel"):
                loss = veomni_loss(x)
            else:
                loss = x.sum()
            return loss
    """
    diags = lint(code, ["NPU203"])
    assert [d.line for d in diags] == [11, 17]
    assert all("comparison" in d.message for d in diags)


# -- NPU204 -----------------------------------------------------------------------------------------


def test_implementation_sources() -> None:
    code = """
    from veomni.ops import VeomniOp, resolve_op
    from veomni.models.utils.op_utils import resolve_op_impl


    class M:
        def __init__(self, config, impl):
            self.a = VeomniOp("rms_norm", "standard", impl)  # a parameter: unknown, fine
            self.b = VeomniOp("rms_norm", "standard", impl="npu")
            self.c = VeomniOp("rope", "full", config.ops_config.rotary_pos_emb_implementation)
            self.d = VeomniOp("rope", "full", resolve_op_impl("rotary_pos_emb_vision_implementation"))
            self.e = VeomniOp("rms_norm", "standard", config._attn_implementation)
            self.f = VeomniOp("attention", "standard", resolve_op_impl("attn_implementation"))
            self.g = resolve_op("moe_experts", "standard", "fused_npu")
            self.h = VeomniOp("moe_experts", "standard", config.ops_config.rms_norm_implementation if config else "eager")
    """
    diags = lint(code, ["NPU204"])
    assert [(d.line, d.col) for d in diags] == [(8, 55), (11, 50), (13, 55), (14, 53)]
    assert '"npu"' in diags[0].message
    assert "`_attn_implementation`" in diags[1].message
    fixed = fix(code, ["NPU204"])
    assert 'VeomniOp("rms_norm", "standard", impl=resolve_op_impl("rms_norm_implementation"))' in fixed
    assert (
        'VeomniOp("rms_norm", "standard", config._attn_implementation)' in fixed
    )  # no fix: attribute of config
    assert 'resolve_op("moe_experts", "standard", resolve_op_impl("moe_implementation"))' in fixed
    assert "config.ops_config.moe_implementation if config" in fixed
    assert fixed.count("import resolve_op_impl") == 1  # already imported (older module): reused


# -- NPU205 -----------------------------------------------------------------------------------------


def _tree_project(rows: list[OpRow]) -> Project:
    return Project(root="/x", generation=VEOMNI_OP, registered=tuple(sorted(rows)))


def test_rows_come_from_the_project() -> None:
    project = _tree_project(
        [OpRow("rms_norm", "standard", "eager", ANY), OpRow("rms_norm", "standard", "my_kernel", NPU)]
    )
    code = """
    from veomni.ops import VeomniOp


    class M:
        def __init__(self):
            self.a = VeomniOp("rms_norm", "standard", "my_kernel")
            self.b = VeomniOp("rms_norm", "offset", "eager")
            self.c = VeomniOp("rope", "full")
    """
    diags = lint(code, ["NPU205"], project=project)
    assert [d.line for d in diags] == [7, 8]
    assert "the tree's register_op rows" in diags[0].message
    assert "variants of `rms_norm`: standard" in diags[0].message
    # with the built-in catalog, my_kernel is unknown and rope/full is known
    diags = lint(code, ["NPU205"])
    assert [d.line for d in diags] == [6]
    assert "implementations: eager, liger_kernel (gpu), npu (npu), triton (gpu)" in diags[0].message


def test_npu_targeted_code() -> None:
    code = """
    from veomni.ops import VeomniOp
    from veomni.ops.config import resolve_op_impl


    def init_patched(self, config):
        self.a = VeomniOp("swiglu_mlp", "standard", resolve_op_impl("swiglu_mlp_implementation"))
        self.b = VeomniOp("swiglu_mlp", "standard", "eager")
        self.c = VeomniOp("cross_entropy_loss", "standard", resolve_op_impl("cross_entropy_loss_implementation"))
        self.d = VeomniOp("rms_norm", "unweighted", resolve_op_impl("rms_norm_implementation", npu_as="eager"))
        self.e = VeomniOp("rms_norm", "standard", "liger_kernel")
        self.f = VeomniOp("load_balancing_loss", "standard", resolve_op_impl("load_balancing_loss_implementation"))
    """
    diags = lint(code, ["NPU205"], NPU_SPEC)
    # rows chosen through the ops-config resolver are the config's business (its NPU handling picks eager):
    # only the hard-coded GPU implementation is reported, and npu_as="eager" (a silent fallback) is never advised
    assert [d.line for d in diags] == [10]
    assert all('npu_as="eager"' not in d.message for d in diags)
    generated = "veomni/models/transformers/toy/generated/patched_modeling_toy_npu.py"
    assert [
        d.line
        for d in lint(
            "# AUTO-GENERATED FILE - DO NOT EDIT\n" + textwrap.dedent(code).lstrip("\n"),
            ["NPU205"],
            generated,
        )
    ] == [11]
    assert lint(code, ["NPU205"], GPU_SPEC) == []


def test_opslot_variant_hint() -> None:
    diags = lint(
        'from veomni.ops import VeomniOp\nh = VeomniOp("rms_norm", "qwen3_5", "eager")\n', ["NPU205"]
    )
    assert "`rms_norm/offset` in VeomniOp" in diags[0].message


# -- NPU206 -----------------------------------------------------------------------------------------


def test_kernel_rows() -> None:
    code = """
    from veomni.ops import register_op
    from veomni.ops.platform import GpuKernelRequirement, NpuKernelRequirement
    from .npu_kernels import fused_rope_forward, fused_rope_backward
    from .triton import triton_rope


    def _npu_rms(x, w):
        import torch_npu
        return torch_npu.npu_rms_norm(x, w)[0]


    def _eager(x, w):
        return x * w


    register_op("rms_norm", "standard", "fused", wrapper=_npu_rms)
    register_op("rms_norm", "standard", "npu", wrapper=_eager, requirement=None)
    register_op("rms_norm", "standard", "npu_v2", wrapper=_eager, requirement=GpuKernelRequirement())
    register_op("rope", "full", "fused", fused_rope_forward, fused_rope_backward)
    register_op("rope", "full", "triton", wrapper=triton_rope)
    register_op("rms_norm", "standard", "eager", wrapper=_eager)
    register_op("rms_norm", "offset", "npu", wrapper=_npu_rms, requirement=NpuKernelRequirement())
    register_op(OpSpec(name="rms_norm"))
    """
    diags = lint(code, ["NPU206"], KERNEL)
    assert [d.line for d in diags] == [16, 17, 18, 19]
    fixed = fix(code, ["NPU206"], KERNEL)
    assert (
        'register_op("rms_norm", "standard", "fused", wrapper=_npu_rms, requirement=NpuKernelRequirement())'
        in fixed
    )
    assert (
        'register_op("rms_norm", "standard", "npu", wrapper=_eager, requirement=NpuKernelRequirement())'
        in fixed
    )
    assert '"npu_v2", wrapper=_eager, requirement=NpuKernelRequirement())' in fixed
    assert "fused_rope_forward, fused_rope_backward, requirement=NpuKernelRequirement())" in fixed
    assert fixed.count("NpuKernelRequirement\n") == 1  # imported once, already there
    assert lint(code, ["NPU206"], MODEL) == []  # model code: not a kernel module


def test_kernel_row_import_added_and_multiline() -> None:
    code = """
    from veomni.ops import register_op


    def _f(x):
        return torch_npu.npu_swiglu(x)


    register_op(
        "swiglu_mlp",
        "standard",
        "npu",
        wrapper=_f,
    )
    """
    expected = """
    from veomni.ops import register_op
    from veomni.ops.requirement import NpuKernelRequirement


    def _f(x):
        return torch_npu.npu_swiglu(x)


    register_op(
        "swiglu_mlp",
        "standard",
        "npu",
        wrapper=_f, requirement=NpuKernelRequirement(),
    )
    """
    assert fix(code, ["NPU206"], KERNEL) == textwrap.dedent(expected).lstrip("\n")


def test_kernel_spec_rows() -> None:
    code = """
    KERNEL_REGISTRY.register(KernelSpec(name="npu", op_name="rms_norm", variant="standard", factory=f,
                                        hardware=HardwareRequirement(device_type="gpu")))
    KERNEL_REGISTRY.register(KernelSpec(name="npu", op_name="rms_norm", variant="qwen3_5", factory=f,
                                        hardware=HardwareRequirement(device_type="npu")))
    KERNEL_REGISTRY.register(KernelSpec(name="liger_kernel", op_name="rms_norm", variant="standard", factory=f,
                                        hardware=HardwareRequirement(device_type="gpu")))
    for _name, _hw in (("npu", HardwareRequirement(device_type="npu")),):
        KERNEL_REGISTRY.register(KernelSpec(name=_name, op_name="x", variant="y", factory=f, hardware=_hw))
    """
    diags = lint(code, ["NPU206"], KERNEL)
    assert [d.line for d in diags] == [2]  # at the GPU requirement the NPU row is given


def test_post_import_block_in_a_crlf_file() -> None:
    text = textwrap.dedent(SPEC_WITH_BLOCK).lstrip("\n").replace("\n", "\r\n")
    diags = lint_source(SourceFile.from_text(GPU_SPEC, text), ["NPU201"], Settings())
    assert where(diags)[0] == (10, 22, 10, 52)


def test_migration_fix_skips_a_suppressed_finding(fake_codemod: list[tuple[str, int]]) -> None:
    code = """
    from veomni.ops.dispatch import OpSlot

    a = OpSlot("rms_norm", "standard")  # noqa: NPU201
    b = OpSlot("rotary_pos_emb", "full")
    """
    diags = lint(code, ["NPU201"])
    assert [(d.line, d.fix is not None) for d in diags] == [(4, True)]
    assert len(fake_codemod) == 1


def test_per_file_ignore_of_npu201_keeps_the_migration_on_npu203(fake_codemod: list[tuple[str, int]]) -> None:
    """Suppression is the engine's: ignoring NPU201 for a file must not remove the fix from NPU203."""
    from npu_lint.core.config import Settings
    from npu_lint.core.source import SourceFile
    from npu_lint.engine import lint_source

    code = (
        'from veomni.ops.dispatch import OpSlot\n\na = OpSlot("rms_norm", "standard")\n\n\n'
        "def f(x):\n    if a.use_non_eager_impl:\n        return a(x)\n    return x\n"
    )
    settings = Settings(per_file_ignores={"*.py": ["NPU201"]})
    diags = lint_source(SourceFile.from_text("m.py", code), ["NPU201", "NPU203"], settings, fix_mode=True)
    assert [d.code for d in diags] == ["NPU203"] and diags[0].fix is not None and diags[0].fix.edits
