"""The static model of patch specs and generated files (npu_lint.veomni.patchgen), on the fixture tree."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

from npu_lint.veomni import patchgen
from tests.rules.snippets import write_file

TREE = Path(__file__).resolve().parent / "fixtures" / "packaging" / "tree"
PKG = TREE / "veomni" / "models" / "transformers"


def test_module_and_root_from_path() -> None:
    spec = PKG / "widget" / "widget_gpu_patch_gen_config.py"
    assert patchgen.module_of(str(spec)) == "veomni.models.transformers.widget.widget_gpu_patch_gen_config"
    assert patchgen.module_of(str(PKG / "widget" / "__init__.py")) == "veomni.models.transformers.widget"
    assert patchgen.veomni_root_of(str(spec)) == str(TREE)
    assert patchgen.path_of_module(
        "veomni.models.transformers.widget.widget_gpu_patch_gen_config", str(spec)
    ) == str(spec)
    assert patchgen.path_of_module("transformers.models.x", str(spec)) is None


def test_spec_patches_decorators_calls_name_map_and_manual_decorator() -> None:
    gpu = patchgen.load_spec(str(PKG / "gadget" / "gadget_gpu_patch_gen_config.py"))
    assert gpu is not None and gpu.parsed
    assert (gpu.source_module, gpu.target_file) == (
        "transformers.models.gadget.modeling_gadget",
        "patched_modeling_gadget_gpu.py",
    )
    got = [(p.kind, p.target, p.replacement, p.name_map) for p in gpu.patches]
    assert got == [
        ("method_override", "GadgetMLP.forward", "gadget_mlp_forward_patched", {}),
        ("method_override", "GadgetRMSNorm.forward", "gadget_norm_forward_patched", {"Gizmo": "Gadget"}),
    ]
    npu = patchgen.load_spec(str(PKG / "gadget" / "gadget_npu_patch_gen_config.py"))
    assert npu is not None
    got = [(p.kind, p.target, p.replacement) for p in npu.patches]
    assert got == [
        ("method_override", "GadgetRMSNorm.forward", "gadget_norm_forward_patched"),
        ("method_override", "GadgetMLP.forward", "gadget_mlp_forward_npu"),
        ("function_replacement", "repeat_kv", "repeat_kv_npu"),
    ]
    ref = npu.resolve("gadget_norm_forward_patched")  # imported from the GPU spec
    assert ref is not None and ref.path.endswith("gadget_gpu_patch_gen_config.py") and ref.line == 22
    assert npu.base_mode == "extend" or npu.base_mode is None  # lists copied, patches not inherited
    assert len(patchgen.effective_patches(npu)) == 3


def test_deepcopy_and_shared_shapes_inherit_patches(tmp_path: Path) -> None:
    shutil.copytree(TREE / "veomni", tmp_path / "veomni")
    pkg = "veomni/models/transformers/widget"
    deep = write_file(
        tmp_path,
        f"{pkg}/widget_npu_patch_gen_config.py",
        """
        from copy import deepcopy

        from veomni.models.transformers.widget.widget_gpu_patch_gen_config import config as gpu_config

        config = deepcopy(gpu_config)
        config.target_file = "patched_modeling_widget_npu.py"


        @config.replace_function("rotate_half")
        def rotate_half_npu(x):
            return x
        """,
    )
    spec = patchgen.load_spec(str(deep))
    assert spec is not None and spec.base_mode == "deepcopy"
    assert patchgen.effective_target_file(spec) == "patched_modeling_widget_npu.py"
    assert patchgen.effective_description(spec) == "Widget VLM with VeOmni patches"
    patches = {(p.kind, p.target): p for p in patchgen.effective_patches(spec) if p.kind != "helper"}
    assert set(patches) == {
        ("method_override", "WidgetTextModel.forward"),
        ("function_replacement", "rotate_half"),
    }
    assert patches[("function_replacement", "rotate_half")].replacement == "rotate_half_npu"  # own patch wins
    shared = write_file(
        tmp_path,
        f"{pkg}/widget_npu_patch_gen_config.py",
        """
        from veomni.models.transformers.widget.widget_gpu_patch_gen_config import config

        config.target_file = "patched_modeling_widget_npu.py"
        """,
    )
    spec = patchgen.parse_spec(str(shared))
    assert spec.base_mode == "shared"
    assert [p.kind for p in patchgen.effective_patches(spec)] == [
        "helper",
        "method_override",
        "function_replacement",
    ]
    found = patchgen.spec_for_generated(str(tmp_path / pkg / "generated" / "patched_modeling_widget_npu.py"))
    assert found is not None and found.path == str(shared)


def test_generated_banner_and_sections() -> None:
    path = PKG / "widget" / "generated" / "patched_modeling_widget_gpu.py"
    text = path.read_text()
    for full in (True, False):
        gen = patchgen.parse_generated(str(path), text, full=full)
        assert gen.source_module == "transformers.models.widget.modeling_widget"
        assert (gen.based_on, gen.based_on_line) == ("5.9.0", 6)
        assert [(k, t) for k, t, _ in gen.banner_patches] == [
            ("method_override", "WidgetTextModel.forward"),
            ("function_replacement", "rotate_half"),
        ]
        kinds = [(s.kind, s.target, s.methods, s.source) for s in gen.sections]
        assert kinds == [
            ("HELPERS", "Module-level", (), None),
            (
                "PATCHED FUNCTION",
                "rotate_half",
                (),
                "veomni.models.transformers.widget.widget_gpu_patch_gen_config",
            ),
            ("MODIFIED CLASS", "WidgetTextModel", ("forward",), None),
        ]
        cls = gen.sections[2].node
        assert isinstance(cls, ast.ClassDef) and cls.lineno == 67
        assert patchgen.find_method(cls, "forward").lineno == 77  # type: ignore[union-attr]
        assert (gen.tree is None) == (not full)


def test_name_map_is_one_pass_longest_first() -> None:
    assert (
        patchgen.apply_name_map("QwenVL QwenVLMoe x", {"QwenVL": "QwenVLMoe"}) == "QwenVLMoe QwenVLMoeMoe x"
    )
    assert patchgen.apply_name_map("AB A", {"A": "X", "AB": "Y"}) == "Y X"


def test_same_body_ignores_docstrings_comments_and_formatting() -> None:
    ta = 'def f(self, x):\n    """Doc."""\n    # c\n    return g(\n        x,\n        1,\n    )\n'
    a = ast.parse(ta)
    tb = "def forward(self, x):\n    return g(x, 1)  # other\n"
    b = ast.parse(tb)
    tc = "def forward(self, x):\n    return g(x, 2)\n"
    c = ast.parse(tc)
    assert patchgen.same_body(a.body[0], ta, b.body[0], tb)
    assert patchgen.same_body(a.body[0], "", b.body[0], "")
    assert not patchgen.same_body(a.body[0], ta, c.body[0], tc)
    assert not patchgen.same_body(b.body[0], tb, c.body[0], tc)


def test_compare_generated_clean_and_drift(tmp_path: Path) -> None:
    for name in (
        "widget/generated/patched_modeling_widget_gpu.py",
        "gadget/generated/patched_modeling_gadget_gpu.py",
    ):
        path = str(PKG / name)
        spec = patchgen.spec_for_generated(path)
        assert spec is not None
        assert patchgen.compare_generated(spec, patchgen.parse_generated(path, Path(path).read_text())) == []
    path = str(PKG / "gadget" / "generated" / "patched_modeling_gadget_npu.py")
    spec = patchgen.spec_for_generated(path)
    assert spec is not None and spec.path.endswith("gadget_npu_patch_gen_config.py")
    drifts = patchgen.compare_generated(
        spec, patchgen.parse_generated(path, Path(path).read_text(), full=False)
    )
    assert [(d.kind, d.line) for d in drifts] == [("body", 34), ("extra-section", 68)]
    assert drifts[0].origin is not None and drifts[0].origin.line == 22
    # a patch without its section
    shutil.copytree(TREE / "veomni", tmp_path / "veomni")
    gen = tmp_path / "veomni/models/transformers/widget/generated/patched_modeling_widget_gpu.py"
    gen.write_text(gen.read_text().replace("# [PATCHED FUNCTION] rotate_half", "# (section marker removed)"))
    spec = patchgen.spec_for_generated(str(gen))
    assert spec is not None
    drifts = patchgen.compare_generated(spec, patchgen.parse_generated(str(gen), gen.read_text()))
    assert [(d.kind, d.origin.line if d.origin else None) for d in drifts] == [("missing-section", 49)]


@pytest.mark.parametrize(
    "line,expected",
    [
        (80, (40, "")),  # `.cuda()` in the patched method -> its spec line (a comment line before it)
        (79, (38, "")),  # the statement before it
        (81, (41, "")),  # the `for` line
        (82, (42, "")),  # a call the formatter joined on one line -> the call's first spec line
        (83, (46, "")),  # after the multi-line call
        (77, (35, "")),  # the def line -> the spec function's def
        (76, (35, "")),  # an upstream decorator of the patched method -> the spec function's def
        (48, (51, "")),  # a replaced function's body
        (37, (31, "")),  # a helper (``add_helper``), emitted verbatim
        (27, (23, "")),  # an OpSlot declared in ``add_post_import_block``: the line inside the spec's string
        (21, (22, "")),  # the post-import block's own import
        (24, (19, "")),  # an import added with ``config.add_import``
    ],
)
def test_origin_of_patched_lines(line: int, expected: tuple[int, str]) -> None:
    path = PKG / "widget" / "generated" / "patched_modeling_widget_gpu.py"
    text = path.read_text()
    omap = patchgen.build_origin_map(str(path), text, ast.parse(text))
    assert omap is not None
    origin = omap.origin(line)
    assert origin is not None and origin.path.endswith("widget_gpu_patch_gen_config.py")
    assert (origin.line, origin.note) == expected


def test_origin_of_unpatched_lines_names_the_override() -> None:
    path = PKG / "widget" / "generated" / "patched_modeling_widget_gpu.py"
    text = path.read_text()
    omap = patchgen.build_origin_map(str(path), text, ast.parse(text))
    assert omap is not None
    origin = omap.origin(58)  # WidgetVisionTower.forward
    assert origin is not None and origin.line == 14
    assert origin.note == (
        'unpatched upstream code: add `@config.override_method("WidgetVisionTower.forward")` in '
        "widget_gpu_patch_gen_config.py"
    )
    assert 'replace_class("WidgetForCausalLM")' in omap.origin(86).note  # type: ignore[union-attr]
    assert omap.origin(16) is None  # upstream imports: no origin


def test_unparsable_spec_is_not_fatal(tmp_path: Path) -> None:
    path = write_file(
        tmp_path, "veomni/models/transformers/x/x_gpu_patch_gen_config.py", "config = PatchConfig(\n"
    )
    spec = patchgen.parse_spec(str(path))
    assert not spec.parsed and spec.patches == []


def test_origin_of_an_external_replacement_import(tmp_path: Path) -> None:
    spec = write_file(
        tmp_path,
        "veomni/models/transformers/knob/knob_gpu_patch_gen_config.py",
        """
        from veomni.patchgen.patch_spec import PatchConfig, create_patch_from_external

        config = PatchConfig(source_module="transformers.models.knob.modeling_knob", target_file="patched_modeling_knob_gpu.py")
        config.patches.append(
            create_patch_from_external(
                target="KnobRMSNorm", replacement_module="fastnorm.rms", replacement_name="FastRMSNorm"
            )
        )
        """,
    )
    gen = write_file(
        tmp_path,
        "veomni/models/transformers/knob/generated/patched_modeling_knob_gpu.py",
        """
        # AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
        import torch

        # ======================================================================
        # [PATCHED CLASS] KnobRMSNorm
        # Original class replaced with: external
        # Source: fastnorm.rms
        # ======================================================================
        # Import from: fastnorm.rms.FastRMSNorm
        from fastnorm.rms import FastRMSNorm as KnobRMSNorm
        """,
    )
    parsed = patchgen.parse_spec(str(spec))
    assert [(p.kind, p.target, p.external_module, p.replacement, p.line) for p in parsed.patches] == [
        ("external", "KnobRMSNorm", "fastnorm.rms", "FastRMSNorm", 4)
    ]
    text = gen.read_text()
    omap = patchgen.build_origin_map(str(gen), text, ast.parse(text))
    assert omap is not None
    assert omap.origin(10) == patchgen.Origin(str(spec), 4)
    assert patchgen.compare_generated(parsed, patchgen.parse_generated(str(gen), text, full=False)) == []


_GENERATED = (
    "# coding=utf-8\n"
    "from veomni.ops import OpSlot\n"
    "from veomni.utils import (\n"
    "    helper,\n"
    "    other as renamed,\n"
    ")\n"
    'DOC = """\n'
    "def not_a_def():\n"
    '"""\n'
    "from veomni.late import after_string\n"
    "\n"
    "@decorated\n"
    "def first():\n"
    "    from veomni.inner import hidden\n"
)


def test_generated_imports_from_the_files_tree_match_a_parse_of_the_header() -> None:
    """The header read from the whole file's tree (no second parse) gives what parsing the header alone gives,
    and a cut inside a statement (a def line in a string) falls back to that parse."""
    clean = _GENERATED.replace('DOC = """\ndef not_a_def():\n"""\n', "")
    tree = ast.parse(clean)
    match = patchgen._FIRST_DEF.search(clean)
    assert match is not None
    assert patchgen._header_statements(tree, clean, match.start()) == tree.body[:3]
    assert patchgen.generated_imports(clean, tree) == patchgen.generated_imports(clean)
    assert patchgen.generated_imports(clean, tree) == {
        "veomni.ops": {"OpSlot": 2},
        "veomni.utils": {"helper": 3, "renamed": 3},
        "veomni.late": {"after_string": 7},
    }
    tree = ast.parse(_GENERATED)
    match = patchgen._FIRST_DEF.search(_GENERATED)
    assert match is not None
    assert patchgen._header_statements(tree, _GENERATED, match.start()) is None  # cut inside the string
    assert patchgen.generated_imports(_GENERATED, tree) == patchgen.generated_imports(_GENERATED) == {}
    assert patchgen._header_statements(tree, "x = 1\r" + _GENERATED, 8) is None  # lone CR: lines uncertain


def test_parse_snippet_shares_one_tree_per_text() -> None:
    from npu_lint.core.astutil import parse_snippet

    first = parse_snippet("from veomni.x import y\n")
    assert first is not None and isinstance(first.body[0], ast.ImportFrom)
    assert parse_snippet("from veomni.x import y\n") is first
    assert parse_snippet("def broken(:\n") is None
    assert parse_snippet("a\x00b") is None  # a null byte: ValueError, not raised
