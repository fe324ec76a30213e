"""NPU207 (module-global OpsConfigSlot) and NPU303 (vendor class swapped in by name) on the veomni==0.1.12
wheel, against an independent count (a text scan), and the migration they carry."""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.diagnostics import Applicability
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.fixers.dispatch import migrate_source
from npu_lint.veomni.profile import detect_profile

STANDIN = Path(__file__).resolve().parents[1] / "fixtures" / "trees" / "veomni_op_runtime"


def _lint(path: Path, codes: list[str]):  # noqa: ANN202
    return lint_source(SourceFile.from_text(str(path), path.read_text()), codes, Settings())


def _scan_opsconfigslot(text: str) -> int:
    """Declarations by text: ``name = OpsConfigSlot(`` at the start of a line (module scope or block)."""
    return len(re.findall(r"^\s*\w+\s*=\s*OpsConfigSlot\(", text, re.M))


@pytest.mark.corpus
def test_npu207_matches_a_text_scan_on_the_wheel() -> None:
    from tests.corpus import veomni_wheel_root

    root = veomni_wheel_root() / "veomni"
    found = expected = 0
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        if "OpsConfigSlot" not in text or path.name == "dispatch.py":
            continue
        diags = _lint(path, ["NPU207"])
        found += len(diags)
        expected += _scan_opsconfigslot(text)
        assert len(diags) == _scan_opsconfigslot(text), path
    assert found == expected > 0


@pytest.mark.corpus
def test_npu303_matches_a_text_scan_on_the_wheel() -> None:
    from tests.corpus import veomni_wheel_root

    root = veomni_wheel_root() / "veomni"
    found = []
    for path in sorted(root.rglob("*_patch_gen_config.py")):
        text = path.read_text()
        diags = _lint(path, ["NPU303"])
        found += [(path.parent.name, d.line) for d in diags]
        scan = re.findall(r'replacement_module="(liger_kernel|flash_attn|torch_npu|triton)[\w.]*"', text)
        assert len(diags) == len(scan), path
    assert [m for m, _ in found] == ["seed_oss", "seed_oss"]


def test_npu207_fix_in_a_spec_makes_the_choice_instance_local() -> None:
    text = textwrap.dedent(
        '''
        from veomni.patchgen.patch_spec import PatchConfig

        config = PatchConfig(source_module="transformers.models.toy.modeling_toy", target_file="x.py")
        config.add_post_import_block(
            """
            from veomni.ops.dispatch import OpsConfigSlot
            veomni_indexer_impl = OpsConfigSlot("dsa_indexer_implementation")
            """
        )


        @config.override_method("ToyIndexer.forward")
        def toy_indexer_forward_patched(self, x):
            if veomni_indexer_impl.value == "eager":
                return x
            return x * 2
        '''
    ).lstrip()
    from npu_lint.veomni import upstream

    upstream_root = Path(__file__).resolve().parents[1] / "fixtures" / "codemod" / "upstream" / "transformers"
    with upstream.use_transformers_root(str(upstream_root)):
        result = migrate_source(text, "toy_gpu_patch_gen_config.py", profile=detect_profile(STANDIN))
    if result.applicability is Applicability.DISPLAY:
        assert any("ToyIndexer" in r for r in result.reasons), result.reasons  # no upstream class to extend
        return
    tree = ast.parse(result.text)
    assert "OpsConfigSlot" not in result.text
    assert "self.veomni_indexer_impl ==" in result.text
    assert 'self.veomni_indexer_impl = resolve_op_impl("dsa_indexer_implementation")' in result.text
    assert tree
