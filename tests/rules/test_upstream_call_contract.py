"""NPU722 and NPU514: a patch stays consistent with the installed transformers (5.9.0) module it patches.

Each defect is written in a shape the dev sets do not use (other models, other callees, other spellings), with
the line it must be reported at, and the correct variant that must stay quiet."""

from __future__ import annotations

import textwrap
from pathlib import Path

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni.genscope import module_bindings, unbound_names
from npu_lint.veomni.patchgen import load_spec
from npu_lint.veomni.upcalls import pipeline_position_keys, scalar_expr

VL = "veomni/models/transformers/qwen2_5vl/qwen2_5_vl_gpu_patch_gen_config.py"
HEAD = """
from functools import partial
from types import SimpleNamespace

from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.qwen2_5_vl.modeling_qwen2_5_vl", target_file="x.py")
"""


def _lines(text: str, code: str = "NPU722", path: str = VL) -> list[int]:
    src = SourceFile.from_text(path, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, [code], Settings()) if d.code == code)


def _messages(text: str, code: str = "NPU722", path: str = VL) -> list[str]:
    src = SourceFile.from_text(path, textwrap.dedent(text).lstrip("\n"))
    return [d.message for d in lint_source(src, [code], Settings()) if d.code == code]


# -- a fake self handed to an upstream unbound method -----------------------------------------------------------

FAKE = (
    HEAD
    + """

@config.override_method("Qwen2_5_VLForConditionalGeneration.get_position_id_func")
def pos_func(self):
    fake = FAKE_BUILD
    return partial(Qwen2_5_VLModel.get_rope_index, fake)


@config.override_method("Qwen2_5_VLForConditionalGeneration.rope_for")
def rope_for(self, input_ids, types):
    fake = FAKE_BUILD
    return Qwen2_5_VLModel.get_rope_index(fake, input_ids, types)
"""
)


def test_fake_self_namespace_without_the_vision_helper() -> None:
    text = FAKE.replace("FAKE_BUILD", "SimpleNamespace(config=self.config)")
    lines = _lines(text)
    assert lines == [18], lines  # the direct call; a partial without a wrapper is not a call
    assert "get_vision_position_ids" in _messages(text)[0]


def test_fake_self_class_carrying_the_helper_is_quiet() -> None:
    text = FAKE.replace("FAKE_BUILD", "_Fake(config=self.config)") + textwrap.dedent(
        """

        class _Fake(SimpleNamespace):
            def get_vision_position_ids(self, *args, **kwargs):
                return Qwen2_5_VLModel.get_vision_position_ids(self, *args, **kwargs)
        """
    )
    assert _lines(text) == []


def test_fake_self_built_elsewhere_is_not_judged() -> None:
    # a copy of the model, or an object from a factory: its attributes are not known
    assert _lines(FAKE.replace("FAKE_BUILD", "copy.copy(self)")) == []
    assert _lines(FAKE.replace("FAKE_BUILD", "SimpleNamespace(**vars(self))")) == []


# -- a wrapped method's required parameters ----------------------------------------------------------------------

WRAPPED = (
    HEAD
    + """

def wrap(fn, model, **kw):
    BODY
    return fn(model, **kw)


@config.override_method("Qwen2_5_VLForConditionalGeneration.get_position_id_func")
def pos_func(self):
    return partial(wrap, Qwen2_5_VLModel.get_rope_index, self.model)
"""
)


def test_wrapper_without_required_token_types() -> None:
    text = WRAPPED.replace("BODY", "kw.pop('second_per_grid_ts', None)")
    assert _lines(text) == [11]
    assert "mm_token_type_ids" in _messages(text)[0]


def test_wrapper_supplying_token_types_is_quiet() -> None:
    for body in (
        "kw['mm_token_type_ids'] = kw['input_ids'] * 0",
        "kw.setdefault('mm_token_type_ids', kw['input_ids'] * 0)",
        "kw.update(mm_token_type_ids=kw['input_ids'] * 0)",
    ):
        assert _lines(WRAPPED.replace("BODY", body)) == [], body


def test_pipeline_keys_read_from_the_tree(tmp_path: Path) -> None:
    data = tmp_path / "veomni" / "data"
    data.mkdir(parents=True)
    (data / "a.py").write_text(
        "def f(position_id_func, ids, mask, extra):\n"
        "    return position_id_func(input_ids=ids, attention_mask=mask, mm_token_type_ids=ids, **extra)\n"
    )
    (data / "b.py").write_text(
        "def g(position_id_func, ids, mask):\n"
        "    kw = {'input_ids': ids, 'mm_token_type_ids': ids}\n"
        "    kw['attention_mask'] = mask\n"
        "    return position_id_func(**kw)\n"
    )
    assert pipeline_position_keys(str(tmp_path / "veomni")) == {
        "input_ids",
        "attention_mask",
        "mm_token_type_ids",
    }
    (data / "c.py").write_text(
        "def h(position_id_func, ids, mask):\n    return position_id_func(input_ids=ids, attention_mask=mask)\n"
    )
    assert pipeline_position_keys(str(tmp_path / "veomni")) == {"input_ids", "attention_mask"}


# -- keywords, positionals and argument kinds --------------------------------------------------------------------

FORWARD = (
    HEAD
    + """

@config.override_method("Qwen2_5_VLModel.forward")
def forward(self, input_ids=None, inputs_embeds=None, attention_mask=None, image_grid_thw=None, **kwargs):
    position_ids = self.compute_3d_position_ids(CALL)
    return position_ids
"""
)


def test_keyword_the_helper_does_not_take() -> None:
    text = FORWARD.replace(
        "CALL", "input_ids, image_grid_thw, None, inputs_embeds, attention_mask, None, rope=1"
    )
    assert _lines(text) == [11]


def test_too_many_positionals() -> None:
    text = FORWARD.replace(
        "CALL", "input_ids, image_grid_thw, None, inputs_embeds, attention_mask, None, None, None, 1"
    )
    assert _lines(text) == [11]


def test_required_parameter_missing_on_a_direct_call() -> None:
    # compute_3d_position_ids(input_ids, image_grid_thw, video_grid_thw, inputs_embeds, attention_mask, past_key_values, ...)
    assert _lines(FORWARD.replace("CALL", "input_ids=input_ids, inputs_embeds=inputs_embeds")) == [11]


def test_call_through_kwargs_or_positionally_is_quiet() -> None:
    for call in (
        "input_ids, image_grid_thw, None, inputs_embeds, attention_mask, None",
        "input_ids=input_ids, inputs_embeds=inputs_embeds, **kwargs",
        "*kwargs['args']",
    ):
        assert _lines(FORWARD.replace("CALL", call)) == [], call


VISION = (
    HEAD
    + """

@config.override_method("Qwen2_5_VisionTransformerPretrainedModel.rot_pos_emb")
def rot(self, grid_thw):
    grid = grid_thw.tolist()
    SIZE
    return self.rotary_pos_emb(ARG)
"""
)


def test_int_where_the_rotary_forward_takes_position_ids() -> None:
    for size, arg in (("n = len(grid) * 2", "n"), ("n = int(grid[0][1])", "n + 1"), ("pass", "64")):
        assert _lines(VISION.replace("SIZE", size).replace("ARG", arg)) == [13], (size, arg)


def test_tensor_under_any_name_is_quiet() -> None:
    for size, arg in (
        ("n = grid_thw[:, 1:]", "n"),
        ("n = max(grid)\n    n = grid_thw", "n"),
        ("pass", "grid_thw"),
    ):
        assert _lines(VISION.replace("SIZE", size).replace("ARG", arg)) == [], (size, arg)


def test_scalar_expression_model() -> None:
    import ast

    fn = ast.parse("def f(x):\n    a = max(1, 2)\n    b = a * 2\n    c = x\n    for d in x: pass\n").body[0]
    assert scalar_expr(ast.parse("b", mode="eval").body, fn)  # type: ignore[arg-type]
    assert not scalar_expr(ast.parse("c", mode="eval").body, fn)  # type: ignore[arg-type]
    assert not scalar_expr(ast.parse("d", mode="eval").body, fn)  # type: ignore[arg-type]


def test_method_the_upstream_class_lacks() -> None:
    text = (
        HEAD
        + "\n\n@config.override_method('Qwen2_5_VLModel.forward')\ndef forward(self):\n    return Qwen2_5_VLModel.rope_index(self)\n"
    )
    assert _lines(text) == [11]
    # a classmethod, a property and an inherited method are not reported
    ok = HEAD + (
        "\n\n@config.override_method('Qwen2_5_VLModel.forward')\ndef forward(self):\n"
        "    v = Qwen2_5_VLModel._from_config(self.config)\n"
        "    return self.loss_function(logits=v, labels=v, vocab_size=3), Qwen2_5_VLModel.get_input_embeddings(self)\n"
    )
    assert _lines(ok) == []


def test_method_the_file_redefines_is_not_judged_by_upstream() -> None:
    text = FORWARD.replace("CALL", "input_ids, rope=1") + textwrap.dedent(
        """

        @config.override_method("Qwen2_5_VLModel.compute_3d_position_ids")
        def c3d(self, input_ids, rope=None):
            return input_ids
        """
    )
    assert _lines(text) == []


# -- NPU514: the generated module's scope ------------------------------------------------------------------------


def test_module_bindings() -> None:
    import ast

    body = ast.parse(
        "import torch.nn.functional as F\nimport os.path\ntry:\n    from x import y\nexcept ImportError:\n    y = None\n"
        "if z:\n    def g(): pass\n"
    ).body
    assert module_bindings(body) == {"F", "os", "y", "g"}
    assert module_bindings(ast.parse("from x import *").body) is None


def _package(tmp_path: Path, npu_helpers: str) -> Path:
    pkg = tmp_path / "veomni" / "models" / "transformers" / "qwen3_vl"
    pkg.mkdir(parents=True)
    for part in ("veomni", "veomni/models", "veomni/models/transformers"):
        (tmp_path / part / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "qwen3_vl_gpu_patch_gen_config.py").write_text(
        textwrap.dedent(
            """
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(
                source_module="transformers.models.qwen3_vl.modeling_qwen3_vl",
                target_file="patched_modeling_qwen3_vl_gpu.py",
            )
            config.add_import("torch.distributed", alias="dist", is_from_import=False)


            @config.add_helper
            def token_types(input_ids, cfg):
                return (input_ids == cfg.image_token_id).long()


            @config.override_method("Qwen3VLModel.get_placeholder_mask")
            def placeholder_mask(self, input_ids, inputs_embeds=None, **kwargs):
                dist.barrier()
                return token_types(input_ids, self.config) == 1
            """
        )
    )
    (pkg / "qwen3_vl_npu_patch_gen_config.py").write_text(
        textwrap.dedent(
            """
            from veomni.models.transformers.qwen3_vl.qwen3_vl_gpu_patch_gen_config import placeholder_mask, token_types
            from veomni.patchgen.patch_spec import PatchConfig

            config = PatchConfig(
                source_module="transformers.models.qwen3_vl.modeling_qwen3_vl",
                target_file="patched_modeling_qwen3_vl_npu.py",
            )
            config.add_import("torch.distributed", alias="dist", is_from_import=False)
            HELPERS
            config.override_method("Qwen3VLModel.get_placeholder_mask", replacement=placeholder_mask)
            """
        ).replace("HELPERS", npu_helpers)
    )
    return pkg


def test_npu_spec_reusing_a_body_without_its_helper(tmp_path: Path) -> None:
    pkg = _package(tmp_path, "")
    spec = load_spec(str(pkg / "qwen3_vl_npu_patch_gen_config.py"))
    assert spec is not None
    assert [u.name for u in unbound_names(spec)] == ["token_types"]
    gpu = load_spec(str(pkg / "qwen3_vl_gpu_patch_gen_config.py"))
    assert gpu is not None and unbound_names(gpu) == []  # the alias `dist` and the helper are bound there


def test_npu_spec_registering_the_helper_is_quiet(tmp_path: Path) -> None:
    pkg = _package(tmp_path, "config.add_helper(token_types)")
    spec = load_spec(str(pkg / "qwen3_vl_npu_patch_gen_config.py"))
    assert spec is not None and unbound_names(spec) == []


# -- NPU515: the upstream copy of a generated file ------------------------------------------------------------

GEN = """
#  Source: transformers.models.gemma3.modeling_gemma3
#  Based on: transformers==VERSION
#
#  Patches applied:
#    - method_override: Gemma3TextModel.forward

import torch
from torch import nn


class Gemma3MultiModalProjector(nn.Module):
    def forward(self, vision_outputs: torch.Tensor):
        batch_size, _, hidden_size = vision_outputs.shape

        reshaped_vision_outputs = BODY
"""


def _gen_lines(text: str) -> list[int]:
    path = "veomni/models/transformers/gemma3/generated/patched_modeling_gemma3_gpu.py"
    src = SourceFile.from_text(path, textwrap.dedent(text).lstrip("\n"))
    return sorted(d.line for d in lint_source(src, ["NPU515"], Settings()) if d.code == "NPU515")


def test_unpatched_upstream_method_edited_in_the_copy() -> None:
    from npu_lint.core.astutil import transformers_version
    from npu_lint.rules.index import rule_index

    version = transformers_version()
    assert version is not None
    # the projector's first statements, then an edit of the transpose (upstream: vision_outputs.transpose(1, 2))
    assert _gen_lines(GEN.replace("VERSION", version).replace("BODY", "vision_outputs")) == [15]
    # another transformers than the banner's: the copy may legitimately differ
    assert _gen_lines(GEN.replace("VERSION", "0.0.1").replace("BODY", "vision_outputs")) == []
    assert rule_index()["NPU515"][0] is False  # off unless selected
