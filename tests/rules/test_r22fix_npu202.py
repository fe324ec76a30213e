"""Issue 20 (round 22's control): NPU202 on an interned tree reads a local bound by several assignments (the
conditional remap written as statements) as fixed when every binding is, and as varying when one reads a
parameter or the local is rebound by a loop."""

from __future__ import annotations

import dataclasses
import textwrap

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni.profile import builtin_profile
from npu_lint.veomni.project import VEOMNI_OP, Project

SPEC = "veomni/models_kernel/transformers/toy/toy_gpu_patch_gen_config.py"


def _interned() -> Project:
    profile = dataclasses.replace(
        builtin_profile(VEOMNI_OP),
        interned_by="`VeomniOp` (`veomni.ops.registry`)",
        per_call_helpers=("attention_op",),
    )
    return Project(root="/x", generation=VEOMNI_OP, profile=profile)


def lint(body: str) -> list:
    head = """
    from veomni.ops import VeomniOp
    from veomni.models_kernel.utils.op_utils import resolve_op_impl
    from veomni.patchgen.patch_spec import PatchConfig

    config = PatchConfig(source_module="transformers.models.toy.modeling_toy", target_file="x_gpu.py")


    """
    text = textwrap.dedent(head).lstrip("\n") + textwrap.dedent(body).lstrip("\n")
    src = SourceFile.from_text(SPEC, text)
    return lint_source(src, ["NPU202"], Settings(), _interned())


def test_statement_remap_of_the_configured_impl_is_fixed() -> None:
    # the same remap as `"eager" if impl == "triton" else impl`, written as a statement
    assert not lint(
        """
        @config.replace_function("apply_rotary_pos_emb")
        def apply_rotary_pos_emb_patched(q, k, cos, sin):
            impl = resolve_op_impl("rotary_pos_emb_implementation")
            if impl == "triton":
                impl = "eager"
            rope = VeomniOp("rope", "full", impl)
            return rope(q, k, cos, sin)
        """
    )


def test_a_binding_from_a_parameter_still_varies() -> None:
    diags = lint(
        """
        @config.replace_function("apply_rotary_pos_emb")
        def apply_rotary_pos_emb_patched(q, k, cos, sin, backend=None):
            impl = resolve_op_impl("rotary_pos_emb_implementation")
            if backend is not None:
                impl = backend
            rope = VeomniOp("rope", "full", impl)
            return rope(q, k, cos, sin)
        """
    )
    assert [d.line for d in diags] == [13]
    assert "the implementation from `impl`, a value of this call" in diags[0].message


def test_a_local_rebound_by_a_loop_varies() -> None:
    diags = lint(
        """
        @config.replace_function("apply_rotary_pos_emb")
        def apply_rotary_pos_emb_patched(q, k, cos, sin):
            impl = "eager"
            for impl in ("eager", "npu"):
                rope = VeomniOp("rope", "full", impl)
            return rope(q, k, cos, sin)
        """
    )
    assert [d.line for d in diags] == [12]


def test_a_method_whose_remapped_local_reads_the_installed_config_is_reported() -> None:
    # in a method the instance could own the handle: a local one of whose bindings reads the ops config at call
    # time follows whichever config was installed last
    diags = lint(
        """
        @config.override_method("ToyAttention.forward")
        def toy_attention_forward(self, q, k, cos, sin):
            impl = resolve_op_impl("rotary_pos_emb_implementation")
            if impl == "triton":
                impl = "eager"
            return VeomniOp("rope", "full", impl)(q, k, cos, sin)
        """
    )
    assert [d.line for d in diags] == [13]
    assert "read from the ops config installed when the call runs" in diags[0].message


ATTENTION = """
from veomni.models_kernel.utils.op_utils import attention_op
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.toy.modeling_toy", target_file="x_gpu.py")
{init}

@config.override_method("ToyAttention.forward")
def toy_attention_forward(self, q, k, v):
    return attention_op()(self, q, k, v)
"""

PATCHED_INIT = """
@config.override_method("ToyAttention.__init__")
def toy_attention_init(self, config, layer_idx):
    self.layer_idx = layer_idx
    self.veomni_attn = attention_op()
"""


def _lint_attention(init: str) -> list:
    src = SourceFile.from_text(SPEC, textwrap.dedent(ATTENTION.format(init=init)).lstrip("\n"))
    return lint_source(src, ["NPU202"], Settings(), _interned())


def test_per_call_helper_beside_the_handle_its_patched_init_stores() -> None:
    # round 22: the forward calls `attention_op()` again instead of the `self.veomni_attn` its `__init__` built
    diags = _lint_attention(PATCHED_INIT)
    assert [d.line for d in diags] == [14]
    assert "already stores its handle as `self.veomni_attn`" in diags[0].message


def test_per_call_helper_in_a_forward_whose_init_is_not_patched_is_quiet() -> None:
    # the tree documents `attention_op()` as callable in `forward` where the module's `__init__` is not patched
    assert not _lint_attention("")
