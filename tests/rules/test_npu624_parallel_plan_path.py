"""NPU624: a parallel plan's module path that the model bound to it (through the package's patch spec) lacks.

Trees are built in tmp_path in VeOmni's layout; the model classes are the installed transformers 5.9.0 ones."""

from __future__ import annotations

import textwrap
from pathlib import Path

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni.project import load_project

PLAN = """
from torch.distributed._tensor import Shard

from ....distributed.parallel_plan import ParallelPlan


def get_parallel_plan():
    ep_plan = {{
        "{prefix}.mlp.experts.gate_up_proj": Shard(0),
        "{prefix}.mlp.experts.down_proj": Shard(0),
    }}
    return ParallelPlan(extra_parallel_plan={{"ep": ep_plan}})
"""

SPEC = """
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.{model}.modeling_{model}", target_file="patched.py")
{extra}

@config.override_method("{cls}.get_parallel_plan")
def get_parallel_plan_patched(self):
    from ..parallel_plan import get_parallel_plan

    return get_parallel_plan()
"""


def _lines(tmp_path: Path, model: str, cls: str, prefix: str, extra: str = "") -> list[int]:
    pkg = tmp_path / "veomni" / "models" / "transformers" / f"my_{model}"
    pkg.mkdir(parents=True)
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'veomni'\n")
    for d in (
        tmp_path / "veomni",
        tmp_path / "veomni" / "models",
        tmp_path / "veomni" / "models" / "transformers",
        pkg,
    ):
        (d / "__init__.py").write_text("")
    (pkg / f"my_{model}_gpu_patch_gen_config.py").write_text(
        textwrap.dedent(SPEC).format(model=model, cls=cls, extra=textwrap.dedent(extra))
    )
    text = textwrap.dedent(PLAN).lstrip("\n").format(prefix=prefix)
    path = pkg / "parallel_plan.py"
    path.write_text(text)
    project = load_project([str(path)])
    found = lint_source(SourceFile.from_text(str(path), text), ["NPU624"], Settings(), project)
    return sorted(d.line for d in found if d.code == "NPU624")


def test_omni_plan_without_the_thinker(tmp_path: Path) -> None:
    assert _lines(tmp_path, "qwen3_omni_moe", "Qwen3OmniMoeForConditionalGeneration", "model.layers.*") == [
        8,
        9,
    ]


def test_text_moe_plan_with_a_vlm_prefix(tmp_path: Path) -> None:
    assert _lines(tmp_path, "qwen3_moe", "Qwen3MoeForCausalLM", "model.language_model.layers.*") == [8, 9]


def test_matching_prefixes_stay_quiet(tmp_path: Path) -> None:
    assert (
        _lines(tmp_path, "qwen3_omni_moe", "Qwen3OmniMoeForConditionalGeneration", "thinker.model.layers.*")
        == []
    )


def test_vlm_matching_prefix_quiet(tmp_path: Path) -> None:
    assert (
        _lines(
            tmp_path, "qwen3_vl_moe", "Qwen3VLMoeForConditionalGeneration", "model.language_model.layers.*"
        )
        == []
    )


def test_spec_init_override_is_read(tmp_path: Path) -> None:
    # the spec's own Model.__init__ renames the decoder: the plan follows the override, not upstream
    extra = """
    @config.override_method("Qwen3VLMoeModel.__init__")
    def model_init_patched(self, config):
        super().__init__(config)
        self.visual = None
        self.decoder = Qwen3VLMoeTextModel._from_config(config.text_config)
    """
    assert (
        _lines(
            tmp_path, "qwen3_vl_moe", "Qwen3VLMoeForConditionalGeneration", "model.decoder.layers.*", extra
        )
        == []
    )


def test_unreadable_class_change_is_not_judged(tmp_path: Path) -> None:
    extra = """
    @config.replace_class("Qwen3VLMoeModel")
    class MyModel:
        pass
    """
    assert (
        _lines(tmp_path, "qwen3_vl_moe", "Qwen3VLMoeForConditionalGeneration", "model.layers.*", extra) == []
    )


def test_same_path_without_the_override_is_reported(tmp_path: Path) -> None:
    assert _lines(
        tmp_path, "qwen3_vl_moe", "Qwen3VLMoeForConditionalGeneration", "model.decoder.layers.*"
    ) == [8, 9]


def test_an_edited_spec_is_read_again(tmp_path: Path) -> None:
    """Found by the review of the round-12 merge: the spec's roots were cached by directory alone, so a long-lived
    process (the language server) kept judging the plan against the spec as it was first read."""
    assert _lines(tmp_path, "qwen3_moe", "Qwen3MoeForCausalLM", "model.language_model.layers.*") == [8, 9]
    pkg = tmp_path / "veomni" / "models" / "transformers" / "my_qwen3_moe"
    spec = pkg / "my_qwen3_moe_gpu_patch_gen_config.py"
    # the package now binds its plan on the VL model, whose language model sits where the plan says
    spec.write_text(
        textwrap.dedent(SPEC).format(
            model="qwen3_vl_moe", cls="Qwen3VLMoeForConditionalGeneration", extra="# edited\n"
        )
    )
    path = pkg / "parallel_plan.py"
    text = path.read_text()
    project = load_project([str(path)])
    found = lint_source(SourceFile.from_text(str(path), text), ["NPU624"], Settings(), project)
    assert [d.line for d in found if d.code == "NPU624"] == []
