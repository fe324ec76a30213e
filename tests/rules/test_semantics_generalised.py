"""Semantics rules (NPU40x RMSNorm, NPU41x loss) on defects written in shapes their examples do not show:
through locals, in a spec's replacement of an upstream method, through the kwargs."""

from __future__ import annotations

import textwrap
from pathlib import Path

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni.project import Project


def _write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def _codes(path: Path, codes: list[str], root: Path | None = None) -> list[tuple[int, str]]:
    src = SourceFile.from_text(str(path), path.read_text(encoding="utf-8"))
    project = Project(root=str(root)) if root is not None else None
    return sorted((d.line, d.code) for d in lint_source(src, codes, Settings(), project))


NORM_SPEC = """
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.{module}", target_file="x.py")


@config.override_method("{cls}.forward")
def replaced_norm_forward(self, x):
    if fused is not None:
        return fused(x, self.weight, self.eps)
    scale = {scale}
    out = self._norm(x.float())
    return (out * scale).type_as(x)
"""


def test_spec_eager_fallback_of_a_zero_initialised_norm_through_a_local(tmp_path: Path) -> None:
    rel = "veomni/models/transformers/gemma2/gemma2_gpu_patch_gen_config.py"
    args = {"module": "gemma2.modeling_gemma2", "cls": "Gemma2RMSNorm"}
    spec = _write(tmp_path, rel, NORM_SPEC.format(scale="self.weight.float()", **args))
    assert _codes(spec, ["NPU402", "NPU404"]) == [(12, "NPU402")]
    for kept in ("1.0 + self.weight.float()", "self.weight.float() + 1", "self.weight.float().add(1.0)"):
        spec.write_text(textwrap.dedent(NORM_SPEC.format(scale=kept, **args)).lstrip("\n"))
        assert _codes(spec, ["NPU402", "NPU404"]) == [], kept


def test_spec_eager_fallback_of_a_ones_initialised_norm_with_the_offset(tmp_path: Path) -> None:
    rel = "veomni/models/transformers/qwen2/qwen2_gpu_patch_gen_config.py"
    args = {"module": "qwen2.modeling_qwen2", "cls": "Qwen2RMSNorm"}
    spec = _write(tmp_path, rel, NORM_SPEC.format(scale="self.weight.add(1)", **args))
    assert _codes(spec, ["NPU402", "NPU404"]) == [(12, "NPU404")]
    spec.write_text(textwrap.dedent(NORM_SPEC.format(scale="self.weight", **args)).lstrip("\n"))
    assert _codes(spec, ["NPU402", "NPU404"]) == []
