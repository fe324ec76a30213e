"""Issue 20 NPU202 recall: a handle built per call in a method, from the ops config installed when the call
runs, on a tree whose handles are interned (where fixed arguments alone are harmless)."""

from __future__ import annotations

import dataclasses
import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni.profile import builtin_profile
from npu_lint.veomni.project import VEOMNI_OP, Project

SPEC = "veomni/models_kernel/transformers/toy/toy_gpu_patch_gen_config.py"


def lint(code: str, codes: list[str], path: str, project: Project | None = None):
    src = SourceFile.from_text(path, textwrap.dedent(code).lstrip("\n"))
    return lint_source(src, codes, Settings(), project)


def _interned() -> Project:
    """A VeomniOp tree whose handle class documents interning (as the maintainers' tree does)."""
    profile = dataclasses.replace(
        builtin_profile(VEOMNI_OP),
        interned_by="`VeomniOp` (`veomni.ops.registry`)",
        per_call_helpers=("attention_op",),
    )
    return Project(root="/x", generation=VEOMNI_OP, profile=profile)


PER_CALL = """
from veomni.ops import VeomniOp
from veomni.ops.config import get_ops_config
from veomni.models_kernel.utils.op_utils import attention_op, resolve_op_impl
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.toy.modeling_toy", target_file="patched_modeling_toy_gpu.py")


@config.override_method("ToyNorm.forward")
def toy_norm_forward(self, hidden_states):
    choice = resolve_op_impl("rms_norm_implementation")
    norm = VeomniOp("rms_norm", "standard", choice)
    return norm(hidden_states, self.weight, eps=self.eps)


@config.override_method("ToyMLP.forward")
def toy_mlp_forward(self, x):
    return VeomniOp("swiglu_mlp", "standard", get_ops_config().swiglu_mlp_implementation)(x)


@config.override_method("ToyAttention.forward")
def toy_attention_forward(self, q, k, v):
    kept = VeomniOp("rms_norm", "standard", self.norm_impl)  # the instance's own choice: same row every call
    return attention_op()(q, k, v), kept


def toy_apply_rope(q, k, cos, sin):
    # a free function: no instance could own the handle (the maintainers' own pattern)
    return VeomniOp("rope", "full", resolve_op_impl("rotary_pos_emb_implementation"))(q, k, cos, sin)
"""


def test_npu202_method_rereading_the_installed_ops_config_on_an_interned_tree() -> None:
    diags = lint(PER_CALL, ["NPU202"], SPEC, _interned())
    assert [d.line for d in diags] == [12, 18]
    assert (
        "the implementation from `choice`, read from the ops config installed when the call runs"
        in diags[0].message
    )
    assert "`get_ops_config().swiglu_mlp_implementation`" in diags[1].message
