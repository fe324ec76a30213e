"""RMSNorm contracts (veomni.norms), the upstream reader's patched-method pairing, and the RMSNorm rules on
an NPU spec that re-registers its GPU sibling's patch functions."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import fix_source, lint_source
from npu_lint.veomni.catalog import ANY, OpRow
from npu_lint.veomni.norms import (
    class_rms_contract,
    rms_variant_contract,
    upstream_rms_contract,
    variant_for_contract,
)
from npu_lint.veomni.project import VEOMNI_OP, Project
from npu_lint.veomni.upstream import patched_methods

GEMMA = "transformers.models.gemma3.modeling_gemma3"
QWEN3 = "transformers.models.qwen3.modeling_qwen3"


@pytest.mark.parametrize(
    "variant,expected",
    [
        ("qwen3_5", "offset"),
        ("offset", "offset"),
        ("standard", "standard"),
        ("unweighted", "unweighted"),
        ("x", None),
    ],
)
def test_variant_contract(variant: str, expected: str | None) -> None:
    assert rms_variant_contract(Project(), variant) == expected


def test_variant_name_comes_from_the_tree() -> None:
    tree = Project(
        generation=VEOMNI_OP,
        registered=(OpRow("rms_norm", "standard", "eager", ANY), OpRow("rms_norm", "qwen3_5", "eager", ANY)),
    )
    assert variant_for_contract(tree, "offset") == "qwen3_5"
    assert variant_for_contract(tree, "standard") == "standard"
    catalog = Project(registered=(OpRow("rms_norm", "offset", "eager", ANY),))
    assert variant_for_contract(catalog, "offset") == "offset"
    assert variant_for_contract(Project(), "offset", "OpSlot") == "qwen3_5"


def test_upstream_contracts() -> None:
    gemma = upstream_rms_contract(GEMMA, "Gemma3RMSNorm")
    assert gemma is not None and gemma.weight_init == "zeros" and gemma.offset and gemma.eps_attr == "eps"
    assert gemma.gemma_style and gemma.upcast
    qwen = upstream_rms_contract(QWEN3, "Qwen3RMSNorm")
    assert qwen is not None and qwen.standard_style and qwen.eps_attr == "variance_epsilon"
    assert upstream_rms_contract(QWEN3, "NoSuchClass") is None


def test_class_contract_of_local_code() -> None:
    tree = ast.parse(
        textwrap.dedent(
            """
            class N:
                def __init__(self, d, eps):
                    self.weight = nn.Parameter(torch.ones(d))
                    self.eps = eps
                def forward(self, x):
                    return norm(x.float()) * (1.0 + self.weight.float())
            """
        )
    )
    init, forward = tree.body[0].body  # type: ignore[attr-defined]
    contract = class_rms_contract(init, forward)
    assert contract.weight_init == "ones" and contract.offset is True and contract.eps_attr == "eps"


def test_patched_methods_skip_unchanged_copies() -> None:
    text = textwrap.dedent(
        f'''
        config = PatchConfig(source_module="{QWEN3}", target_file="x.py")

        @config.override_method("Qwen3ForCausalLM.forward")
        def patched(self, input_ids=None, **kwargs):
            return self.model(input_ids=input_ids, **kwargs)
        '''
    )
    found = patched_methods(ast.parse(text), text, "forward", ("ForCausalLM",))
    assert [(p.cls, p.name) for p in found] == [("Qwen3ForCausalLM", "forward")]
    assert found[0].upstream.name == "forward"


def _pair(tmp_path: Path, variant: str) -> tuple[Path, Path]:
    pkg = tmp_path / "veomni" / "models" / "transformers" / "qwen3_5"
    pkg.mkdir(parents=True)
    for d in (
        tmp_path / "veomni",
        tmp_path / "veomni" / "models",
        tmp_path / "veomni" / "models" / "transformers",
        pkg,
    ):
        (d / "__init__.py").write_text("")
    gpu = pkg / "qwen3_5_gpu_patch_gen_config.py"
    gpu.write_text(
        textwrap.dedent(
            '''
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_5.modeling_qwen3_5", target_file="a.py")
            config.add_post_import_block(
                """
                from veomni.ops.dispatch import OpSlot
                veomni_rms_norm = OpSlot("rms_norm", "qwen3_5")
                """
            )
            veomni_rms_norm = None


            @config.override_method("Qwen3_5RMSNorm.forward")
            def qwen3_5_rmsnorm_forward_patched(self, x):
                if veomni_rms_norm.use_non_eager_impl:
                    return veomni_rms_norm(x, self.weight, self.eps)
                return x
            '''
        ).lstrip()
    )
    npu = pkg / "qwen3_5_npu_patch_gen_config.py"
    npu.write_text(
        textwrap.dedent(
            f'''
            from veomni.models.transformers.qwen3_5.qwen3_5_gpu_patch_gen_config import qwen3_5_rmsnorm_forward_patched
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(source_module="transformers.models.qwen3_5.modeling_qwen3_5", target_file="b.py")
            config.add_post_import_block(
                """
                from veomni.ops.dispatch import OpSlot
                veomni_rms_norm = OpSlot("rms_norm", "{variant}")
                """
            )
            config.override_method("Qwen3_5RMSNorm.forward", replacement=qwen3_5_rmsnorm_forward_patched)
            '''
        ).lstrip()
    )
    return gpu, npu


def test_reused_gpu_function_with_a_standard_npu_slot(tmp_path: Path) -> None:
    _gpu, npu = _pair(tmp_path, "standard")
    src = SourceFile.from_text(str(npu), npu.read_text())
    diags = lint_source(src, ["NPU402"], Settings())
    assert [d.code for d in diags] == ["NPU402"]
    assert diags[0].line == 8  # the slot's variant in the NPU spec's block, which the fix edits
    fixed = fix_source(src, ["NPU402"], Settings(), unsafe=True).text
    assert 'OpSlot("rms_norm", "qwen3_5")' in fixed


def test_reused_gpu_function_with_the_offset_npu_slot_is_clean(tmp_path: Path) -> None:
    _gpu, npu = _pair(tmp_path, "qwen3_5")
    src = SourceFile.from_text(str(npu), npu.read_text())
    assert lint_source(src, ["NPU401", "NPU402", "NPU403", "NPU404", "NPU405"], Settings()) == []
