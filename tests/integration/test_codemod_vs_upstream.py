"""Our migration of the veomni==0.1.12 specs beside VeOmni's maintainers' own (5d90dd16), handle by handle.

Needs a local reconstruction of ByteDance-Seed/VeOmni at 5d90dd16 (``NPU_LINT_VEOMNI_5D90``, default
/work/corpora/veomni-5d90dd16; never committed): skipped without it. For each model, the handles built in
``override_method("<Cls>.__init__")`` functions - (class, op, variant, config field) - are read from both
specs. Every upstream handle must be ours too, except the documented differences
(bench/accuracy/codemod-vs-upstream.md): glm_moe_dsa's ``dsa_*`` handles (ours keeps the kernel choice as an
instance attribute). Ours may add only RoPE handles in attention classes (upstream builds most per call).
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from npu_lint.core.diagnostics import Applicability
from npu_lint.fixers.dispatch import migrate_source
from npu_lint.veomni.profile import detect_profile
from tests.corpus import veomni_wheel_root

UPSTREAM = Path(os.environ.get("NPU_LINT_VEOMNI_5D90", "/work/corpora/veomni-5d90dd16"))
STANDIN = Path(__file__).resolve().parents[1] / "fixtures" / "trees" / "veomni_op_runtime"
MODELS = ("qwen3", "llama", "qwen2", "qwen3_vl", "seed_oss", "gemma3", "glm_moe_dsa", "qwen3_5")
DOCUMENTED = {("glm_moe_dsa", "dsa_indexer"), ("glm_moe_dsa", "dsa_attention")}

pytestmark = [
    pytest.mark.corpus,
    pytest.mark.skipif(not UPSTREAM.is_dir(), reason=f"no VeOmni 5d90dd16 reconstruction at {UPSTREAM}"),
]


def _field(fn: ast.FunctionDef, impl: ast.expr) -> str | None:
    if isinstance(impl, ast.Call) and impl.args and isinstance(impl.args[0], ast.Constant):
        return impl.args[0].value
    if isinstance(impl, ast.Name):
        for node in ast.walk(fn):
            if (
                isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == impl.id for t in node.targets)
                and isinstance(node.value, ast.Call)
            ):
                return _field(fn, node.value)
    return None


def handles(text: str, handle: str = "VeomniOp") -> set[tuple[str, str, str, str | None]]:
    """(class, op, variant, field) of every handle an ``__init__`` override builds."""
    out = set()
    for fn in ast.parse(text).body:
        if not isinstance(fn, ast.FunctionDef):
            continue
        target = None
        for dec in fn.decorator_list:
            if isinstance(dec, ast.Call) and getattr(dec.func, "attr", "") == "override_method" and dec.args:
                target = getattr(dec.args[0], "value", None)
        if not target or not target.endswith(".__init__"):
            continue
        cls = target.split(".")[0]
        for node in ast.walk(fn):
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name)
                and node.value.func.id == handle
                and len(node.value.args) >= 2
            ):
                op, variant = (a.value for a in node.value.args[:2])  # type: ignore[attr-defined]
                impl = node.value.args[2] if len(node.value.args) > 2 else None
                out.add((cls, op, variant, _field(fn, impl) if impl is not None else None))
    return out


@pytest.mark.parametrize("model", MODELS)
def test_same_handles_as_upstream(model: str) -> None:
    spec = f"{model}_gpu_patch_gen_config.py"
    theirs_path = UPSTREAM / "veomni" / "models_kernel" / "transformers" / model / spec
    if not theirs_path.is_file():
        pytest.skip(f"{theirs_path} is not in the reconstruction")
    ours_path = veomni_wheel_root() / "veomni" / "models" / "transformers" / model / spec
    result = migrate_source(ours_path.read_text(), str(ours_path), profile=detect_profile(STANDIN))
    assert result.applicability is not Applicability.DISPLAY, result.reasons
    ours = handles(result.text)
    theirs = {h for h in handles(theirs_path.read_text()) if (model, h[1]) not in DOCUMENTED}
    assert theirs <= ours, sorted(theirs - ours)
    extra = ours - theirs
    assert all(op in ("rope", "rope_vision") and cls.endswith("Attention") for cls, op, _, _ in extra), extra
