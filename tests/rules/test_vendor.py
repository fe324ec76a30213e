"""NPU301 vendor-kernel-import / NPU302 vendor-kernel-call: detection, messages, scope and the exact fixes."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from npu_lint.core.astutil import resolve_relative
from npu_lint.core.config import Settings
from npu_lint.core.diagnostics import Applicability
from npu_lint.core.source import SourceFile
from npu_lint.engine import fix_source, lint_source
from npu_lint.veomni.layout import is_model_code

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vendor"
MODEL = "veomni/models/transformers/toy/modeling_toy.py"
CODES = ["NPU301", "NPU302"]


def lint(code: str, path: str = MODEL, codes: list[str] = CODES):
    return lint_source(SourceFile.from_text(path, textwrap.dedent(code).lstrip("\n")), codes, Settings())


def fix(text: str, path: str = MODEL, codes: list[str] = CODES) -> str:
    return fix_source(SourceFile.from_text(path, text), codes, Settings(), unsafe=True).text


@pytest.mark.parametrize("name", ["rms_norm_module", "unused_import", "init_shapes"])
def test_fixture_fix_whole_file(name: str) -> None:
    source = (FIXTURES / f"{name}.py").read_text()
    expected = (FIXTURES / f"{name}.expected.py").read_text()
    out = fix(source)
    assert out == expected
    assert fix(out) == out, "a second run changed the file"


def test_rms_norm_display_reasons() -> None:
    source = (FIXTURES / "rms_norm_module.py").read_text()
    diags = lint_source(SourceFile.from_text(MODEL, source), ["NPU302"], Settings())
    by_line = {d.line: d for d in diags}
    gemma = next(d for d in diags if "1.0 + self.weight" in d.source_line)
    assert gemma.fix.applicability is Applicability.DISPLAY and "offset" in gemma.fix.reason
    stats = next(d for d in diags if "rstd =" in d.source_line)
    assert stats.fix.applicability is Applicability.DISPLAY and "rstd" in stats.fix.reason
    free = next(d for d in diags if "(x, w)" in d.source_line)
    assert "not inside a method" in free.fix.reason
    fixable = [d for d in by_line.values() if d.fix.applicability is Applicability.UNSAFE]
    assert len(fixable) == 3


def test_unsafe_fix_is_not_applied_without_unsafe() -> None:
    source = (FIXTURES / "rms_norm_module.py").read_text()
    out = fix_source(SourceFile.from_text(MODEL, source), CODES, Settings(), unsafe=False)
    assert out.text == source


def test_fix_in_spec_and_generated_is_display_only() -> None:
    body = (FIXTURES / "unused_import.py").read_text()
    spec = "veomni/models/transformers/toy/toy_npu_patch_gen_config.py"
    generated = "veomni/models/transformers/toy/generated/patched_modeling_toy_npu.py"
    for path in (spec, generated):
        diags = lint_source(SourceFile.from_text(path, body), ["NPU302"], Settings())
        assert [d.fix.applicability for d in diags] == [Applicability.DISPLAY]
        assert fix(body, path) == body


def test_guard_messages() -> None:
    diags = lint(
        """
        from veomni.utils.device import IS_NPU_AVAILABLE

        if IS_NPU_AVAILABLE:
            from torch_npu import npu_rms_norm, npu_rotary_mul
        try:
            import flash_attn_interface
        except ModuleNotFoundError:
            flash_attn_interface = None


        def rope(q, cos, sin):
            from liger_kernel.transformers.rope import liger_rotary_pos_emb

            return liger_rotary_pos_emb(q, q, cos, sin)
        """,
        codes=["NPU301"],
    )
    messages = [d.message for d in diags]
    assert len(messages) == 3
    assert "under `if IS_NPU_AVAILABLE:`: still a direct vendor import" in messages[0]
    assert "`npu_rms_norm` -> `rms_norm/standard`, `npu_rotary_mul` -> `rope/full`" in messages[0]
    assert "inside `try: ... except ImportError`" in messages[1]
    assert "`flash_attn_interface` -> `attention/standard`" in messages[1]
    assert "imported lazily inside `rope()`" in messages[2]


def test_non_availability_if_is_not_called_a_guard() -> None:
    (diag,) = lint(
        """
        def mlp(self, x):
            if self.use_fused:
                from liger_kernel.ops.swiglu import LigerSiLUMulFunction
            return x
        """,
        codes=["NPU301"],
    )
    assert "self.use_fused" not in diag.message
    assert "imported lazily inside `mlp()`" in diag.message


def test_relative_import_of_veomni_kernels_is_resolved() -> None:
    path = "veomni/models/transformers/deepseek_v3/device_patch.py"
    diags = lint(
        """
        def make():
            from ....ops.kernels.rms_norm.triton_batch_invariant import batch_invariant_rms_norm

            return batch_invariant_rms_norm(1, 2, 3)
        """,
        path=path,
    )
    assert [d.code for d in diags] == ["NPU301", "NPU302"]
    assert "`veomni.ops.kernels.rms_norm.triton_batch_invariant`" in diags[0].message
    assert "rms_norm/standard" in diags[1].message
    assert resolve_relative(path, "....ops.kernels") == "veomni.ops.kernels"
    assert resolve_relative(path, ".config") == "veomni.models.transformers.deepseek_v3.config"


def test_spec_forms() -> None:
    diags = lint(
        '''
        from veomni.patchgen.patch_spec import PatchConfig, create_patch_from_external

        config = PatchConfig(source_module="transformers.models.toy.modeling_toy", target_file="x.py")
        config.add_import("torch_npu", names=["npu_rotary_mul"])
        config.add_import("veomni.utils.device", names=["IS_NPU_AVAILABLE"])
        config.add_post_import_block(
            """
            from liger_kernel.transformers.swiglu import LigerSwiGLUMLP
            """
        )
        config.patches.append(
            create_patch_from_external(
                target="ToyRMSNorm",
                replacement_module="liger_kernel.transformers.rms_norm",
                replacement_name="LigerRMSNorm",
            )
        )
        ''',
        path="veomni/models/transformers/toy/toy_gpu_patch_gen_config.py",
        codes=["NPU301"],
    )
    assert len(diags) == 3
    assert "adds a vendor import to the generated file" in diags[0].message
    assert "`npu_rotary_mul` -> `rope/full`" in diags[0].message
    assert "post-import block" in diags[1].message and "swiglu_mlp/standard" in diags[1].message
    assert "`ToyRMSNorm` is replaced by the vendor class" in diags[2].message
    assert all(d.fix is None for d in diags)


def test_calls_not_reported() -> None:
    assert not lint(
        """
        import torch_npu
        import triton
        import triton.language as tl
        from veomni.ops.kernels.cross_entropy import ForCausalLMLoss

        torch_npu.npu.set_device(0)
        n = triton.cdiv(10, 3)
        loss = ForCausalLMLoss(1, 2)
        """,
        codes=["NPU302"],
    )


def test_rotary_interleave_maps_to_wan_variant() -> None:
    (diag,) = lint(
        """
        import torch_npu


        def rope(x, cos, sin):
            return torch_npu.npu_rotary_mul(x, cos, sin, rotary_mode="interleave")
        """,
        codes=["NPU302"],
    )
    assert "`rope/wan`" in diag.message


def test_vendor_class_instantiation_message() -> None:
    (diag,) = lint(
        """
        from liger_kernel.transformers.rms_norm import LigerRMSNorm as ToyRMSNorm

        norm = ToyRMSNorm(16)
        """,
        codes=["NPU302"],
    )
    assert "instantiates the vendor class `liger_kernel.transformers.rms_norm.LigerRMSNorm`" in diag.message


def test_side_effect_import_message_and_fix() -> None:
    (diag,) = lint(
        """
        import torch
        import torch_npu

        x = torch.ones(1)
        """,
        codes=["NPU301"],
    )
    assert "only for its side effect" in diag.message
    assert diag.fix is not None and diag.fix.applicability is Applicability.UNSAFE


def test_lazy_unused_import_has_no_fix() -> None:
    (diag,) = lint(
        """
        def load(device):
            if device.type == "npu":
                import torch_npu  # noqa: F401

                device.index
        """,
        codes=["NPU301"],
    )
    assert diag.fix is None


@pytest.mark.parametrize(
    "path,expected",
    [
        ("veomni/models/transformers/toy/modeling_toy.py", True),
        ("veomni/models/transformers/toy/generated/patched_modeling_toy_gpu.py", True),
        ("veomni/models/diffusers/ltx2_3/ltx_core/model/attention.py", True),
        ("veomni/models/auto.py", False),
        ("veomni/models/transformers/attention_utils.py", False),
        ("veomni/utils/device.py", False),
        ("veomni/distributed/parallel_state.py", False),
        ("my_models/modeling_foo.py", True),
        ("/home/u/VeOmni/veomni/models/transformers/qwen3/modeling.py", True),
        ("veomni/models_kernel/transformers/qwen3/qwen3_gpu_patch_gen_config.py", True),
        ("veomni/models_kernel/utils/op_utils.py", False),
        ("veomni/models_kernel/utils/loss_utils/cross_entropy_loss.py", False),
        ("veomni/kernels/_kernels/rms_norm/standard/npu.py", False),
    ],
)
def test_scope(path: str, expected: bool) -> None:
    assert is_model_code(path) is expected


def test_scope_in_a_tree_is_its_model_packages(tmp_path) -> None:
    root = tmp_path / "repo"
    package = root / "veomni" / "models_kernel" / "transformers" / "toy"
    (package / "generated").mkdir(parents=True)
    (package / "toy_gpu_patch_gen_config.py").write_text("")
    utils = root / "veomni" / "models_kernel" / "utils" / "loss_utils"
    utils.mkdir(parents=True)
    packages = (str(package.resolve()),)
    assert is_model_code(str(package / "modeling.py"), str(root), packages)
    assert not is_model_code(str(utils / "cross_entropy_loss.py"), str(root), packages)
    assert is_model_code(str(tmp_path / "elsewhere.py"), str(root), packages)


def test_framework_and_kernel_files_not_linted() -> None:
    code = "import torch_npu\n\ny = torch_npu.npu_rms_norm(1, 2)[0]\n"
    for path in ("veomni/utils/device.py", "veomni/ops/kernels/rms_norm/npu.py", "veomni/models/auto.py"):
        assert not lint(code, path=path), path


def test_registry_backend_modules(tmp_path: Path) -> None:
    """A model-local backend (named by a sibling's ``BackendSpec(entry=...)``, or registering backends itself):
    its import is reported with the move-to-veomni/ops/kernels remedy; its kernel calls are the implementation."""
    package = tmp_path / "veomni" / "models" / "transformers" / "demo"
    package.mkdir(parents=True)
    (package / "device_patch.py").write_text(
        "from ....ops.config.registry import BackendSpec\n\n"
        'NPU = BackendSpec(entry="veomni.models.transformers.demo.npu_patch:rms_norm_forward_npu")\n'
    )
    backend = package / "npu_patch.py"
    backend.write_text(
        "import torch_npu\n\n\ndef rms_norm_forward_npu(self, x):\n"
        "    return torch_npu.npu_rms_norm(x, self.weight, epsilon=self.eps)[0]\n"
    )
    diags = lint_source(SourceFile.from_text(str(backend), backend.read_text()), CODES, Settings())
    assert [d.code for d in diags] == ["NPU301"]
    assert "registry backend that lives in the model package" in diags[0].message
    assert "move the implementation beside the tree's other kernels" in diags[0].message
    assert "`register_op` (`veomni.ops`)" in diags[0].message
    own = (
        "import torch_npu\n\nfrom ....ops.config.registry import BackendSpec\n\n"
        'SWIGLU = BackendSpec(entry="x:y")\ny = torch_npu.npu_swiglu(1)\n'
    )
    diags = lint_source(SourceFile.from_text(str(package / "other.py"), own), CODES, Settings())
    assert [d.code for d in diags] == ["NPU301"]


def test_else_branch_guard() -> None:
    (diag,) = lint(
        """
        from veomni.utils.device import IS_NPU_AVAILABLE

        if IS_NPU_AVAILABLE:
            pass
        else:
            from flash_attn import flash_attn_func
        """,
        codes=["NPU301"],
    )
    assert "in the `else` of `if IS_NPU_AVAILABLE:`" in diag.message
