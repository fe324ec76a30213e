"""The dispatch-migration codemod on small specs and modules written for these tests (tests/fixtures/codemod).

Each fixture ``<name>.py`` has its whole expected output ``<name>.expected.py``. The spec fixtures target
``transformers.models.toy.modeling_toy``, read from a stand-in upstream tree of our own writing
(``tests/fixtures/codemod/upstream/transformers``), so the expected files hold no copied library code and do not
depend on the installed transformers version (the real source is exercised by tests/fixers/test_upstream.py and
the corpus integration test).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from npu_lint.core.diagnostics import Applicability
from npu_lint.core.source import SourceFile
from npu_lint.fixers.dispatch import build_migration_fix, edits_between, migrate_source
from npu_lint.rules.base import Context
from npu_lint.veomni import upstream

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "codemod"
UPSTREAM = str(FIXTURES / "upstream" / "transformers")
TREES = Path(__file__).resolve().parents[1] / "fixtures" / "trees"
OP_TREE = TREES / "veomni_op_models_kernel"  # our VeomniOp-era stand-in: the names the expected files use

CASES = {
    # name: (applicability on a VeomniOp tree, reason fragment or "")
    "spec_toy_norm_mlp": (Applicability.SAFE, ""),
    "spec_toy_rope": (Applicability.SAFE, ""),
    "spec_toy_loss": (Applicability.SAFE, ""),
    "module_gemma_norm": (Applicability.SAFE, ""),
    "module_rope_mlp": (Applicability.SAFE, ""),
    "module_display_unknown_op": (Applicability.DISPLAY, "no VeomniOp row is known"),
    "module_display_no_self": (Applicability.DISPLAY, "no `self` for the handle"),
}


def _run(name: str, generation: str | None = "veomniop", root: Path | None = OP_TREE):
    path = FIXTURES / f"{name}.py"
    with upstream.use_transformers_root(UPSTREAM):
        return migrate_source(
            path.read_text(), str(path), generation=generation, root=str(root) if root else None
        )


@pytest.mark.parametrize("name", sorted(CASES))
def test_fixture_whole_output(name: str) -> None:
    result = _run(name)
    expected = (FIXTURES / f"{name}.expected.py").read_text()
    assert result.text == expected
    applicability, reason = CASES[name]
    assert result.applicability is applicability, result.reasons
    if reason:
        assert any(reason in r for r in result.reasons), result.reasons
    else:
        assert result.reasons == ()
    ast.parse(result.text)


@pytest.mark.parametrize("name", sorted(CASES))
def test_second_run_changes_nothing(name: str) -> None:
    once = _run(name)
    if once.applicability is Applicability.DISPLAY:
        return  # display-only texts are never written
    with upstream.use_transformers_root(UPSTREAM):
        again = migrate_source(once.text, str(FIXTURES / f"{name}.py"), root=str(OP_TREE))
    assert again.text == once.text
    assert not again.handles and not again.reasons


def test_gemma_one_plus_weight_becomes_offset_with_raw_weight() -> None:
    result = _run("module_gemma_norm")
    variants = {h.attr: (h.op, h.variant) for h in result.handles}
    # the offset variant is named as the tree's profile names it (qwen3_5 in our VeomniOp stand-in)
    assert variants == {"norm_slot": ("rms_norm", "qwen3_5"), "zero_centred_norm": ("rms_norm", "qwen3_5")}
    assert "1.0 + self.weight.float(), " not in result.text.split("def forward")[1]


def test_opslot_profile_migrates_nothing() -> None:
    # an OpSlot-era tree under target-api auto has no handle API to migrate to: nothing is written
    result = _run("module_rope_mlp", generation=None, root=TREES / "op_slot_models")
    assert result.applicability is Applicability.DISPLAY and not result.handles
    assert result.text == (FIXTURES / "module_rope_mlp.py").read_text()
    assert "OpSlot generation" in result.reasons[0]


def test_opslot_tree_build_fix_is_none() -> None:
    from npu_lint.veomni.profile import detect_profile

    ctx = _ctx("module_rope_mlp")
    ctx.project.api = detect_profile(TREES / "op_slot_models")  # type: ignore[union-attr]
    assert build_migration_fix(ctx.source, ctx.project) is None


def test_forced_target_api_on_opslot_tree_is_display_only() -> None:
    # target-api = veomni-op on a tree that lacks VeomniOp: never import a name the tree does not define
    from npu_lint.veomni.profile import detect_profile

    api = detect_profile(TREES / "op_slot_models", "veomni-op")
    path = FIXTURES / "module_rope_mlp.py"
    with upstream.use_transformers_root(UPSTREAM):
        result = migrate_source(path.read_text(), str(path), profile=api)
    assert result.applicability is Applicability.DISPLAY
    assert any("not importable" in r and "`VeomniOp` from veomni.ops" in r for r in result.reasons)


def test_no_tree_is_unsafe_with_builtin_names() -> None:
    result = _run("module_rope_mlp", generation=None, root=None)
    assert result.applicability is Applicability.UNSAFE
    assert "built-in VeomniOp profile" in result.reasons[0]


def test_kernel_generation_writes_the_kernel_names() -> None:
    kernel_tree = TREES / "veomni_kernel_models_kernel"
    result = _run("spec_toy_loss", generation=None, root=kernel_tree)
    assert result.applicability is Applicability.SAFE, result.reasons
    text = result.text
    assert "= VeomniKernel(" in text and 'resolve_kernel_impl("cross_entropy_loss_implementation"' in text
    assert "partial(ForCausalLMLoss, kernel=self." in text
    assert 'config.add_import("veomni.kernels", names=["VeomniKernel"])' in text
    assert (
        "veomni.models_kernel.utils.kernel_utils" in text and "veomni.models_kernel.utils.loss_utils" in text
    )
    assert "VeomniOp" not in text and "resolve_op_impl" not in text
    norm = _run("module_gemma_norm", generation=None, root=kernel_tree)
    assert {h.variant for h in norm.handles} == {"qwen3_5"}
    assert "from veomni.kernels import VeomniKernel" in norm.text


def test_file_without_slots_is_untouched() -> None:
    text = "import torch\n\n\ndef f(x):\n    return x\n"
    result = migrate_source(text, "veomni/models/transformers/toy/modeling_toy.py")
    assert result.text == text and not result.handles and not result.reasons


def test_guard_raising_in_fused_branch_is_display_only() -> None:
    text = (
        (FIXTURES / "module_gemma_norm.py")
        .read_text()
        .replace(
            "            return norm_slot(x, 1.0 + self.weight.float(), self.eps)",
            "            if x.dim() != 3:\n                raise ValueError('3D only')\n"
            "            return norm_slot(x, 1.0 + self.weight.float(), self.eps)",
        )
    )
    result = migrate_source(text, "m.py", generation="veomniop")
    assert result.applicability is Applicability.DISPLAY
    assert any("raises" in r for r in result.reasons)


def _ctx(name: str, path: str | None = None, generation: str | None = "veomniop") -> Context:
    text = (FIXTURES / f"{name}.py").read_text()
    source = SourceFile.from_text(path or str(FIXTURES / f"{name}.py"), text)

    from npu_lint.veomni.profile import detect_profile

    class Project:
        root = str(OP_TREE)
        rows = None

    project = Project()
    project.generation = generation  # type: ignore[attr-defined]
    project.api = detect_profile(OP_TREE)  # type: ignore[attr-defined]
    return Context(source, ast.parse(text), project)


def test_build_migration_fix_edits_reproduce_the_migrated_text() -> None:
    ctx = _ctx("module_rope_mlp")
    fix = build_migration_fix(ctx.source, ctx.project)
    assert fix is not None and fix.applicability is Applicability.SAFE
    text = ctx.source.text
    for edit in sorted(fix.edits, reverse=True):
        text = text[: edit.start] + edit.content + text[edit.end :]
    assert text == (FIXTURES / "module_rope_mlp.expected.py").read_text()
    assert "VeomniOp" in fix.title


def test_build_migration_fix_skips_generated_files() -> None:
    ctx = _ctx("module_rope_mlp", path="veomni/models/transformers/toy/generated/patched_modeling_toy_gpu.py")
    ctx.source.kind.generated = True
    assert build_migration_fix(ctx.source, ctx.project) is None


def test_build_migration_fix_display_carries_reason() -> None:
    ctx = _ctx("module_display_no_self")
    fix = build_migration_fix(ctx.source, ctx.project)
    assert fix is not None and fix.applicability is Applicability.DISPLAY
    assert "no `self`" in fix.reason


def test_edits_between_are_minimal() -> None:
    old = "a\nb\nc\n"
    new = "a\nB\nc\nd\n"
    edits = edits_between(old, new)
    assert [(e.start, e.end, e.content) for e in edits] == [(2, 4, "B\n"), (6, 6, "d\n")]


def test_guard_whose_branch_does_not_call_the_slot_is_display_only() -> None:
    text = (
        "from veomni.ops.dispatch import OpSlot\n\nmoe = OpSlot('moe_experts', 'standard')\n\n\n"
        "class Experts:\n"
        "    def forward(self, x):\n"
        "        if moe.use_non_eager_impl:\n"
        "            return fused_experts(x)\n"
        "        return x\n"
    )
    result = migrate_source(text, "m.py", generation="veomniop")
    assert result.applicability is Applicability.DISPLAY
    assert any("does not call the slot" in r for r in result.reasons)


def test_module_passed_to_a_non_swiglu_slot_is_display_only() -> None:
    text = (
        "from veomni.ops.dispatch import OpSlot\n\nmoe = OpSlot('moe_experts', 'standard')\n\n\n"
        "class Experts:\n"
        "    def forward(self, x, idx, w):\n"
        "        if moe.use_non_eager_impl:\n"
        "            return moe(self, x, idx, w)\n"
        "        return x\n"
    )
    result = migrate_source(text, "m.py", generation="veomniop")
    assert result.applicability is Applicability.DISPLAY
    assert any("passes the module itself" in r for r in result.reasons)


def test_slots_declared_but_used_elsewhere_is_display_only() -> None:
    text = (
        "from veomni.patchgen.patch_spec import PatchConfig\n\n"
        "config = PatchConfig(source_module='transformers.models.llama.modeling_llama', target_file='x.py')\n"
        "config.add_post_import_block(\n"
        '    """\n'
        "    from veomni.ops.dispatch import OpSlot\n"
        "    veomni_rms_norm = OpSlot('rms_norm', 'standard')\n"
        '    """\n'
        ")\n"
    )
    result = migrate_source(text, "x_npu_patch_gen_config.py", generation="veomniop")
    assert result.applicability is Applicability.DISPLAY
    assert "add_post_import_block" not in result.text
    assert any("declared here but no function" in r for r in result.reasons)


@pytest.mark.parametrize(
    ("spelling", "expected"),
    [
        ("op-slot", "op-slot"),
        ("OpSlot", "op-slot"),
        ("veomni-op", "veomni-op"),
        ("VeomniOp", "veomni-op"),
        ("VeomniKernel", "veomni-kernel"),
        (None, None),
    ],
)
def test_generation_spellings(spelling: str | None, expected: str | None) -> None:
    from npu_lint.fixers.dispatch import normalize_generation

    assert normalize_generation(spelling) == expected


def test_project_generation_spelled_with_hyphen_and_registry_rows() -> None:
    from npu_lint.veomni.catalog import BUILTIN_ROWS

    ctx = _ctx("module_gemma_norm", generation="veomni-op")
    fix = build_migration_fix(ctx.source, ctx.project)
    assert fix is not None and fix.applicability is Applicability.SAFE, fix and fix.reason
    # a VeomniOp tree whose registry lacks rms_norm/qwen3_5: display-only, with the reason
    ctx2 = _ctx("module_gemma_norm", generation="veomni-op")
    ctx2.project.rows = tuple(r for r in BUILTIN_ROWS if r.op != "rms_norm")  # type: ignore[union-attr]
    fix2 = build_migration_fix(ctx2.source, ctx2.project)
    assert fix2 is not None and fix2.applicability is Applicability.DISPLAY
    assert "rms_norm/qwen3_5" in fix2.reason


def test_post_import_block_built_by_concatenation_is_display_only() -> None:
    text = (
        "from veomni.patchgen.patch_spec import PatchConfig\n\n"
        "config = PatchConfig(source_module='transformers.models.llama.modeling_llama', target_file='x.py')\n"
        "config.add_post_import_block(\n"
        "    'from veomni.ops.dispatch import OpSlot\\n'\n"
        '    \'veomni_rms_norm = OpSlot("rms_norm", "standard")\\n\'\n'
        ")\n"
    )
    result = migrate_source(text, "x_gpu_patch_gen_config.py", generation="veomniop")
    assert result.applicability is Applicability.DISPLAY
    assert any("not a plain string literal" in r for r in result.reasons)


def test_unknown_upstream_class_is_display_only() -> None:
    text = (FIXTURES / "spec_toy_norm_mlp.py").read_text().replace("ToyRMSNorm", "ToyMissingNorm")
    with upstream.use_transformers_root(UPSTREAM):
        result = migrate_source(text, "toy_gpu_patch_gen_config.py", generation="veomniop")
    assert result.applicability is Applicability.DISPLAY
    assert any("has no class `ToyMissingNorm`" in r for r in result.reasons)


def test_fused_path_refusing_a_case_gives_that_case_to_the_eager_path() -> None:
    """Gemma-style soft-capped logits: the fused branch raised for soft-capping; migrated, soft-capped models
    take the eager branch (logits computed and capped, the handle-bound loss given logits only) and the
    others the fused branch, as VeOmni's maintainers wrote it for gemma3."""
    text = (
        "from veomni.ops.dispatch import OpSlot\n\nloss_slot = OpSlot('cross_entropy_loss', 'causal')\n\n\n"
        "class ToyLM:\n"
        "    def __init__(self, config):\n"
        "        self.config = config\n\n"
        "    def forward(self, hidden_states, labels):\n"
        "        if loss_slot.use_non_eager_impl:\n"
        "            if self.config.cap is not None:\n"
        "                raise ValueError('no cap in the fused loss')\n"
        "            loss, _, _ = loss_slot(logits=None, labels=labels, hidden_states=hidden_states, weights=self.w)\n"
        "        else:\n"
        "            logits = self.head(hidden_states)\n"
        "            if self.config.cap is not None:\n"
        "                logits = (logits / self.config.cap).tanh() * self.config.cap\n"
        "            loss, _, _ = self.loss_function(logits=logits, labels=labels, hidden_states=hidden_states, weights=self.w)\n"
        "        return loss\n"
    )
    result = migrate_source(text, "m.py", root=str(OP_TREE))
    assert result.applicability is Applicability.SAFE, result.reasons
    forward = result.text.split("def forward")[1]
    assert "raise" not in forward
    assert "if self.config.cap is not None:\n            logits = self.head(hidden_states)" in forward
    assert "self.loss_function(logits=logits, labels=labels)" in forward  # logits path only
    assert "else:\n            loss, _, _ = self.loss_function(logits=None" in forward
    assert "(logits / self.config.cap).tanh()" in forward  # soft-capping stays applied
