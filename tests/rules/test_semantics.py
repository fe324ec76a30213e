"""NPU401/NPU402 beyond the documented examples, and the upstream transformers reader (5.9.0 installed)."""

from __future__ import annotations

import textwrap

import pytest

from npu_lint.core.astutil import transformers_dir
from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import fix_source, lint_source
from npu_lint.veomni.upstream import upstream_path, upstream_zero_init

MODEL = "veomni/models/transformers/toy/modeling_toy.py"
SPEC = "veomni/models/transformers/gemma3/gemma3_gpu_patch_gen_config.py"
GENERATED = "veomni/models/transformers/gemma3/generated/patched_modeling_gemma3_gpu.py"


def lint(code: str, codes: list[str], path: str = MODEL):
    return lint_source(SourceFile.from_text(path, textwrap.dedent(code).lstrip("\n")), codes, Settings())


def fix(code: str, codes: list[str], path: str = MODEL) -> str:
    src = SourceFile.from_text(path, textwrap.dedent(code).lstrip("\n"))
    return fix_source(src, codes, Settings(), unsafe=True).text


# -- the upstream reader ----------------------------------------------------------------------------


def test_transformers_is_located_without_import() -> None:
    import sys

    base = transformers_dir()
    assert base is not None and (base / "__init__.py").is_file()
    assert (
        upstream_path("transformers.models.gemma3.modeling_gemma3")
        == base / "models/gemma3/modeling_gemma3.py"
    )
    assert upstream_path("transformers.models.nope.modeling_nope") is None
    assert upstream_path("torch.nn") is None
    assert "transformers.models.gemma3.modeling_gemma3" not in sys.modules


@pytest.mark.parametrize(
    "module,cls,expected",
    [
        ("transformers.models.gemma3.modeling_gemma3", "Gemma3RMSNorm", True),
        ("transformers.models.qwen3_5.modeling_qwen3_5", "Qwen3_5RMSNorm", True),
        ("transformers.models.qwen3_next.modeling_qwen3_next", "Qwen3NextRMSNorm", True),
        ("transformers.models.llama.modeling_llama", "LlamaRMSNorm", False),
        ("transformers.models.qwen3.modeling_qwen3", "Qwen3RMSNorm", False),
        ("transformers.models.gemma3.modeling_gemma3", "NoSuchClass", None),
        ("transformers.models.nope.modeling_nope", "X", None),
    ],
)
def test_upstream_zero_init(module: str, cls: str, expected: bool | None) -> None:
    from importlib.metadata import version

    assert version("transformers") == "5.9.0"  # the pin of veomni 0.1.12, read without importing it
    assert upstream_zero_init(module, cls) is expected


# -- NPU401 -----------------------------------------------------------------------------------------


def test_offset_forms() -> None:
    code = """
    from veomni.ops.dispatch import OpSlot

    veomni_rms_norm = OpSlot("rms_norm", "qwen3_5")


    class Norm:
        def forward(self, x):
            a = veomni_rms_norm(x, 1 + self.weight, self.eps)
            b = veomni_rms_norm(x, (1.0 + self.weight.float()).to(x.dtype), self.eps)
            c = veomni_rms_norm(x, self.weight + 1.0, self.eps)
            d = veomni_rms_norm(x, self.weight + 2, self.eps)  # not the offset
            e = veomni_rms_norm(x, 1 + self.weight * 2, self.eps)
            return a + b + c + d + e
    """
    diags = lint(code, ["NPU401"])
    assert [d.line for d in diags] == [8, 9, 10, 12]
    assert "variant `qwen3_5`" in diags[0].message
    fixed = fix(code, ["NPU401"])
    assert "a = veomni_rms_norm(x, self.weight, self.eps)" in fixed
    assert "b = veomni_rms_norm(x, self.weight.float().to(x.dtype), self.eps)" in fixed
    assert "c = veomni_rms_norm(x, self.weight, self.eps)" in fixed
    assert "e = veomni_rms_norm(x, (self.weight * 2), self.eps)" in fixed


def test_variables() -> None:
    code = """
    class Norm:
        def __init__(self, impl):
            self.rms = VeomniOp("rms_norm", "offset", impl)

        def forward(self, x, flag):
            w = 1.0 + self.weight
            y = self.rms(x, w, eps=self.eps)
            if flag:
                v = 1.0 + self.weight
            else:
                v = self.weight
            z = self.rms(x, v, eps=self.eps)  # assigned twice, one raw: not reported
            return y + z
    """
    diags = lint(code, ["NPU401"])
    assert [d.line for d in diags] == [7]
    assert "`w = 1.0 + self.weight`" in diags[0].message


def test_standard_or_unknown_handles_are_not_offset() -> None:
    code = """
    from veomni.ops.dispatch import OpSlot

    veomni_rms_norm = OpSlot("rms_norm", "standard")
    if USE_OFFSET:  # alternatives (a branch): ambiguous, skipped; a straight re-declaration is judged by its
        twice = OpSlot("rms_norm", "qwen3_5")  # last one (tests/rules/test_norms20_redeclared_handle.py)
    else:
        twice = OpSlot("rms_norm", "standard")


    def f(self, x, other):
        a = veomni_rms_norm(x, 1.0 + self.weight, self.eps)
        b = twice(x, 1.0 + self.weight, self.eps)
        c = other(x, 1.0 + self.weight, self.eps)
        return a + b + c
    """
    assert lint(code, ["NPU401", "NPU402"]) == []


def test_handle_resolved_through_the_spec_target_class() -> None:
    code = """
    from veomni.ops import VeomniOp


    @config.override_method("Qwen3_5RMSNorm.__init__")
    def init_patched(self, dim, eps=1e-6):
        self.veomni_rms_norm = VeomniOp("rms_norm", "offset", "eager")


    @config.override_method("Qwen3NextRMSNorm.__init__")
    def other_init_patched(self, dim, eps=1e-6):
        self.veomni_rms_norm = VeomniOp("rms_norm", "standard", "eager")


    @config.override_method("Qwen3_5RMSNorm.forward")
    def forward_patched(self, x):
        return self.veomni_rms_norm(x, 1 + self.weight, eps=self.eps)
    """
    diags = lint(code, ["NPU401"], SPEC)
    assert [d.line for d in diags] == [16]


# -- NPU402 -----------------------------------------------------------------------------------------


def test_upstream_class_through_the_spec_source_module() -> None:
    code = """
    from veomni.patchgen.patch_spec import PatchConfig

    config = PatchConfig(source_module="transformers.models.llama.modeling_llama", target_file="x.py")
    config.add_post_import_block(
        '''
        from veomni.ops.dispatch import OpSlot
        veomni_rms_norm = OpSlot("rms_norm", "standard")
        '''
    )


    @config.override_method("LlamaRMSNorm.forward")
    def forward_patched(self, hidden_states):
        if veomni_rms_norm.use_non_eager_impl:
            return veomni_rms_norm(hidden_states, self.weight, self.variance_epsilon)
        return hidden_states
    """
    assert lint(code, ["NPU402"], SPEC) == []  # Llama's weight starts at ones
    gemma = code.replace("llama.modeling_llama", "gemma3.modeling_gemma3").replace(
        "LlamaRMSNorm", "Gemma3RMSNorm"
    )
    diags = lint(gemma, ["NPU402"], SPEC)
    # every call of the block's slot passes the raw weight: reported at the slot's variant, in the block
    assert [d.line for d in diags] == [7]
    assert "`Gemma3RMSNorm` initialises its weight to zeros" in diags[0].message
    fixed = fix(gemma, ["NPU402"], SPEC)
    assert 'veomni_rms_norm = OpSlot("rms_norm", "qwen3_5")' in fixed  # edited inside the block string


def test_generated_file_reads_its_banner() -> None:
    code = """
    # ======================================================================
    # AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
    # Source: transformers.models.gemma3.modeling_gemma3
    # Based on: transformers==5.9.0
    # ======================================================================
    from veomni.ops import VeomniOp


    class Gemma3RMSNorm:
        def forward(self, x):
            return self.rms(x, self.weight, eps=self.eps)

        def setup(self):
            self.rms = VeomniOp("rms_norm", "standard", "eager")
    """
    diags = lint(code, ["NPU402"], GENERATED)
    # every call of the handle is wrong: reported at the declared variant, where the fix edits (as NPU403)
    assert [d.line for d in diags] == [14]
    assert diags[0].fix is not None and not diags[0].fix.is_applicable  # generated: display only


def test_local_init_wins_over_upstream() -> None:
    code = """
    import torch
    from torch import nn
    from veomni.ops import VeomniOp
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm


    class OnesNorm(Gemma3RMSNorm):
        def __init__(self, dim):
            super().__init__(dim)
            self.weight = nn.Parameter(torch.ones(dim))
            self.rms = VeomniOp("rms_norm", "standard", "eager")

        def forward(self, x):
            return self.rms(x, self.weight, eps=self.eps)


    class Inherited(Gemma3RMSNorm):
        def setup(self):
            self.rms = VeomniOp("rms_norm", "standard", "eager")

        def forward(self, x):
            return self.rms(x, self.weight.float(), eps=self.eps)
    """
    diags = lint(code, ["NPU402"])
    assert [d.line for d in diags] == [19]  # Inherited's handle declaration (its only call is wrong)


def test_shared_handle_gets_no_fix() -> None:
    code = """
    import torch
    from torch import nn
    from veomni.ops.dispatch import OpSlot

    veomni_rms_norm = OpSlot("rms_norm", "standard")


    class ZeroNorm(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.weight = nn.Parameter(torch.zeros(dim))

        def forward(self, x):
            return veomni_rms_norm(x, self.weight, self.eps)


    class OneNorm(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x):
            return veomni_rms_norm(x, self.weight, self.eps)
    """
    diags = lint(code, ["NPU402"])
    assert [d.line for d in diags] == [14]
    assert diags[0].fix is None  # switching the shared slot would break OneNorm
