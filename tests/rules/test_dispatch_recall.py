"""Issue 20 dispatch recall beyond the documented examples: guards whose handle is reached through a bound
callable or whose implementation name is held by an attribute, and OpSlot-era instances that keep the slot or
read its binding where they cached its kernel."""

from __future__ import annotations

import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni.project import OP_SLOT, Project

MAIN_SPEC = "veomni/models/transformers/toy/toy_gpu_patch_gen_config.py"


def lint(code: str, codes: list[str], path: str, project: Project | None = None):
    src = SourceFile.from_text(path, textwrap.dedent(code).lstrip("\n"))
    return lint_source(src, codes, Settings(), project)


def test_npu203_guard_reaches_the_handle_through_a_lambda() -> None:
    code = """
    from torch import nn
    from veomni.ops import VeomniOp


    class ToyExperts(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.veomni_experts = VeomniOp("moe_experts", "standard", config.ops_config.moe_implementation)
            self.run_experts = lambda h, idx, w: self.veomni_experts(h, idx, w)
            self.mode = config.ops_config.moe_implementation

        def forward(self, h, idx, w):
            if self.mode == "eager":
                out = toy_loop_experts(h, idx, w)
            else:
                out = self.run_experts(h, idx, w)
            return out
    """
    (diag,) = lint(code, ["NPU203"], "veomni/models_kernel/transformers/toy/modeling_toy.py")
    assert diag.line == 13


def test_npu203_impl_test_without_a_handle_stays_quiet() -> None:
    code = """
    import functools


    def toy_loss(logits, labels, config):
        scale = functools.partial(toy_scale, factor=2)
        if config.ops_config.cross_entropy_loss_implementation == "eager":
            return toy_eager_loss(logits, labels)
        return scale(toy_fused_loss(logits, labels))
    """
    assert not lint(code, ["NPU203"], "veomni/models_kernel/transformers/toy/modeling_toy.py")


OPSLOT_SPEC = '''
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.toy.modeling_toy", target_file="patched_modeling_toy_gpu.py")
config.add_post_import_block(
    """
    from veomni.ops.dispatch import OpSlot
    veomni_toy_conv = OpSlot("causal_conv1d", "standard")
    veomni_toy_rule = OpSlot("chunk_gated_delta_rule", "standard")
    """
)
veomni_toy_conv = None
veomni_toy_rule = None


@config.override_method("ToyLinearAttention.__init__")
def toy_linear_attention_init(self, config):
    self.conv_fn = veomni_toy_conv.bound_kernel()
    self.rule_fn = veomni_toy_rule.use_eager_impl and toy_eager_rule or veomni_toy_rule


@config.override_method("ToyLinearAttention.forward")
def toy_linear_attention_forward(self, x, cu_seqlens=None):
    fused = veomni_toy_conv.bound_kernel() is not None
    if cu_seqlens is not None and not fused:
        raise RuntimeError("varlen needs the fused conv")
    return self.rule_fn(self.conv_fn(x))


@config.override_method("ToyOther.forward")
def toy_other_forward(self, x):
    if veomni_toy_conv.use_non_eager_impl:  # no cached kernel on this class: the summary's business
        return veomni_toy_conv(x)
    return x
'''


def test_npu201_instance_level_slot_defects_are_reported_on_an_opslot_tree() -> None:
    project = Project(root="/x", generation=OP_SLOT)
    diags = lint(OPSLOT_SPEC, ["NPU201"], MAIN_SPEC, project)
    by_line = {d.line: d.message for d in diags}
    assert (
        "`self.rule_fn` (one outcome: `veomni_toy_rule`) stores the module-global dispatch slot"
        in by_line[18]
    )
    assert "cached its kernel in `self.conv_fn` (in `__init__`)" in by_line[23]
    summary = [d for d in diags if d.line not in (18, 23)]
    assert len(summary) == 1 and "module-global dispatch in this file" in summary[0].message


GPU_SIBLING = """
from veomni.ops import VeomniOp
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.toy.modeling_toy", target_file="patched_modeling_toy_gpu.py")


@config.override_method("ToyNorm.__init__")
def toy_norm_init_patched(self, hidden_size):
    self.veomni_norm = VeomniOp("rms_norm", "standard", "eager")


@config.override_method("ToyNorm.forward")
def toy_norm_forward_patched(self, x):
    return self.veomni_norm(x, self.weight)


@config.override_method("ToyLM.__init__")
def toy_lm_init_patched(self, config):
    self.veomni_ce = VeomniOp("cross_entropy_loss", "standard", "eager")


@config.override_method("ToyLM.forward")
def toy_lm_forward_patched(self, input_ids, labels=None):
    return self.veomni_ce(input_ids, labels)
"""

NPU_SIBLING = """
from veomni.models.transformers.toy.toy_gpu_patch_gen_config import (
    toy_lm_forward_patched,
    toy_norm_forward_patched,
    toy_norm_init_patched,
)
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.toy.modeling_toy", target_file="patched_modeling_toy_npu.py")

config.override_method("ToyNorm.__init__", replacement=toy_norm_init_patched)
config.override_method("ToyNorm.forward", replacement=toy_norm_forward_patched)

config.override_method(
    "ToyLM.forward",
    replacement=toy_lm_forward_patched,
)
"""


def test_npu208_reports_where_the_missing_init_registration_belongs(tmp_path) -> None:
    package = tmp_path / "veomni" / "models" / "transformers" / "toy"
    package.mkdir(parents=True)
    (package / "toy_gpu_patch_gen_config.py").write_text(
        textwrap.dedent(GPU_SIBLING).lstrip("\n"), encoding="utf-8"
    )
    (diag,) = lint(NPU_SIBLING, ["NPU208"], str(package / "toy_npu_patch_gen_config.py"))
    assert diag.line == 13  # the first registration of a ToyLM patch, not the import at the top
    assert "`ToyLM.__init__`" in diag.message and "ToyNorm" not in diag.message
