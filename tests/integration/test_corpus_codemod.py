"""The dispatch-migration codemod on the real veomni==0.1.12 patch specs (an OpSlot-generation tree).

The wheel itself has no handle API, so the migration targets the names of a VeomniOp-era profile: our stand-in
tree (tests/fixtures/trees/veomni_op_runtime). For qwen3, seed_oss, qwen3_vl, gemma3 and qwen3_5 the migrated
spec must parse, hold no OpSlot code and no ``use_non_eager_impl``, construct every handle inside an
``__init__`` (stored on ``self``), use only (op, variant) pairs the profile registers, call on ``self`` only
handles its class constructs, and be a fixpoint. What is not migrated exactly (display-only) is listed in
bench/accuracy/codemod-vs-upstream.md.
"""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest

from npu_lint.core.diagnostics import Applicability
from npu_lint.fixers.dispatch import migrate_source
from npu_lint.veomni import upstream
from npu_lint.veomni.profile import detect_profile
from tests.corpus import veomni_wheel_root

STANDIN = Path(__file__).resolve().parents[1] / "fixtures" / "trees" / "veomni_op_runtime"
API = detect_profile(STANDIN)

MODELS = ("qwen3", "seed_oss", "qwen3_vl", "gemma3", "qwen3_5")
# models whose migration cannot be exact: the fix is display-only, and why
DISPLAY: dict[str, str] = {}
PAIRS = {(op, v) for op, variants in API.variants for v in variants}

pytestmark = pytest.mark.corpus


def test_transformers_is_installed() -> None:
    """The migrations read the installed transformers source (make test installs transformers 5.9.0)."""
    assert upstream.transformers_root() is not None, "transformers is not installed: pip install -e '.[dev]'"


@pytest.fixture(scope="module")
def migrated() -> dict[str, tuple[str, object]]:
    root = veomni_wheel_root()
    out = {}
    for model in MODELS:
        path = root / "veomni" / "models" / "transformers" / model / f"{model}_gpu_patch_gen_config.py"
        result = migrate_source(path.read_text(), str(path), profile=API)
        out[model] = (str(path), result)
    return out


def _target(fn: ast.FunctionDef) -> str | None:
    for dec in fn.decorator_list:
        if (
            isinstance(dec, ast.Call)
            and isinstance(dec.func, ast.Attribute)
            and dec.func.attr == "override_method"
        ):
            if dec.args and isinstance(dec.args[0], ast.Constant):
                return dec.args[0].value
    return None


@pytest.mark.parametrize("model", MODELS)
def test_migrated_spec_shape(model: str, migrated: dict) -> None:
    path, result = migrated[model]
    tree = ast.parse(result.text)
    # no OpSlot code, no guard
    assert "use_non_eager_impl" not in result.text
    for node in ast.walk(tree):
        assert not (isinstance(node, ast.Name) and node.id == "OpSlot")
        assert not (isinstance(node, ast.alias) and node.name == "OpSlot")
        assert not (isinstance(node, ast.ImportFrom) and node.module == "veomni.ops.dispatch")
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            assert "OpSlot(" not in node.value and "veomni.ops.dispatch" not in node.value
    # every handle is built in an __init__ and stored on self; triples are in the catalog
    built: dict[str, set[str]] = {}
    handles = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "attention_op":
            handles += 1  # the tree's attention helper builds the attention handle
            continue
        if not (
            isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "VeomniOp"
        ):
            continue
        handles += 1
        op, variant = (a.value for a in node.args[:2])  # type: ignore[attr-defined]
        assert (op, variant) in PAIRS, (op, variant)
    for fn in tree.body:
        if not isinstance(fn, ast.FunctionDef):
            continue
        target = _target(fn)
        for node in ast.walk(fn):
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call)
                and getattr(node.value.func, "id", None) in ("VeomniOp", "attention_op")
            ):
                assert target and target.endswith(".__init__"), (fn.name, target)
                (tgt,) = node.targets
                assert (
                    isinstance(tgt, ast.Attribute)
                    and isinstance(tgt.value, ast.Name)
                    and tgt.value.id == "self"
                )
                built.setdefault(target.split(".")[0], set()).add(tgt.attr)
    assert handles == len(result.handles) > 0
    # handles called on self in a class's overrides are constructed by that class
    for fn in tree.body:
        if isinstance(fn, ast.FunctionDef) and (target := _target(fn)) and not target.endswith(".__init__"):
            cls = target.split(".")[0]
            used = {
                n.attr
                for n in ast.walk(fn)
                if isinstance(n, ast.Attribute)
                and isinstance(n.value, ast.Name)
                and n.value.id == "self"
                and any(n.attr == h.attr for h in result.handles)
            }
            assert used <= built.get(cls, set()), (target, used, built.get(cls))
    # applicability: safe against the target profile unless something is not exact (display, with the reason)
    if model in DISPLAY:
        assert result.applicability is Applicability.DISPLAY
        assert any(DISPLAY[model] in r for r in result.reasons), result.reasons
    else:
        assert result.applicability is Applicability.SAFE or all(
            r.startswith("specs of other models import") or "stays on ALL_ATTENTION_FUNCTIONS" in r
            for r in result.reasons
        ), result.reasons


@pytest.mark.parametrize("model", MODELS)
def test_second_run_changes_nothing(model: str, migrated: dict) -> None:
    path, result = migrated[model]
    again = migrate_source(result.text, path, profile=API)
    assert again.text == result.text
    assert not again.handles


def test_rms_norm_variants(migrated: dict) -> None:
    """qwen3_5's OpSlot rms_norm/qwen3_5 becomes the profile's offset variant (rms_norm/qwen3_5, as upstream)
    with the raw weight."""
    _, result = migrated["qwen3_5"]
    norm = [h for h in result.handles if h.op == "rms_norm"]
    assert [(h.cls, h.variant) for h in norm] == [("Qwen3_5RMSNorm", "qwen3_5")]
    assert re.search(r"return self\.veomni_rms_norm\(x, self\.weight, eps=self\.eps\)", result.text)
    _, qwen3 = migrated["qwen3"]
    assert [(h.cls, h.variant) for h in qwen3.handles if h.op == "rms_norm"] == [("Qwen3RMSNorm", "standard")]


def test_cli_fix_migrates_a_spec_where_the_tree_has_the_handle_api(tmp_path) -> None:
    """`npu-lint check --fix --unsafe-fixes` on a copy of the wheel with our VeomniOp-era stand-in laid over it
    migrates the spec exactly as the codemod does, and a second run changes nothing."""
    import subprocess
    import sys

    from npu_lint.rules.base import all_rules
    from tests.corpus import veomni_models_copy

    assert "NPU201" in all_rules(), "NPU201 (which offers the migration) is not registered"
    veomni_models_copy(tmp_path)
    # the wheel has no handle API: lay our VeomniOp-era stand-in over the copy, so the tree defines every name
    # the migration imports (on the bare wheel, target-api auto finds the OpSlot generation and offers nothing)
    shutil.copytree(STANDIN / "veomni", tmp_path / "veomni", dirs_exist_ok=True)
    spec = tmp_path / "veomni" / "models" / "transformers" / "seed_oss" / "seed_oss_gpu_patch_gen_config.py"
    original = spec.read_text()
    cmd = [
        sys.executable,
        "-m",
        "npu_lint",
        "check",
        "--select",
        "NPU2",
        "--fix",
        "--unsafe-fixes",
        str(spec),
    ]
    subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    fixed = spec.read_text()
    expected = migrate_source(original, str(spec), profile=detect_profile(tmp_path))
    assert expected.applicability is Applicability.SAFE, expected.reasons
    assert fixed == expected.text
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert spec.read_text() == fixed
    assert "NPU201" not in again.stdout and "NPU203" not in again.stdout


def test_cli_fix_migrates_gpu_spec_and_npu_sibling(tmp_path) -> None:
    """`npu-lint check --fix` over qwen3's package (wheel copy + our VeomniOp stand-in): the GPU spec migrates,
    its NPU sibling re-registers the new `__init__` overrides (NPU208), and a second `--fix` changes nothing."""
    import subprocess
    import sys

    from tests.corpus import veomni_models_copy

    veomni_models_copy(tmp_path)
    shutil.copytree(STANDIN / "veomni", tmp_path / "veomni", dirs_exist_ok=True)
    package = tmp_path / "veomni" / "models" / "transformers" / "qwen3"
    cmd = [sys.executable, "-m", "npu_lint", "check", "--no-cache", "--select", "NPU2", "--fix", str(package)]
    subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    gpu = (package / "qwen3_gpu_patch_gen_config.py").read_text()
    npu = (package / "qwen3_npu_patch_gen_config.py").read_text()
    assert "OpSlot(" not in gpu and "def qwen3_rms_norm_init_patched(" in gpu
    assert '"Qwen3RMSNorm.__init__",\n    replacement=qwen3_rms_norm_init_patched' in npu
    assert "OpSlot" not in npu
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert (package / "qwen3_gpu_patch_gen_config.py").read_text() == gpu
    assert (package / "qwen3_npu_patch_gen_config.py").read_text() == npu
    specs_left = [
        line
        for line in again.stdout.splitlines()
        if "_patch_gen_config.py:" in line and any(code in line for code in ("NPU201", "NPU203", "NPU208"))
    ]
    assert not specs_left, specs_left  # what remains is in generated/ (regenerate with patchgen)


def test_qwen3_5_gated_delta_net(migrated: dict) -> None:
    """The GDN ops as VeOmni's maintainers wrote them: handles built in `Qwen3_5GatedDeltaNet.__init__` (the eager
    gated-norm module stays for its weight), kernels called with the ops' contracts, no bound-kernel aliases."""
    _, result = migrated["qwen3_5"]
    gdn = {(h.op, h.variant) for h in result.handles if h.cls == "Qwen3_5GatedDeltaNet"}
    assert gdn == {
        ("rms_norm_gated", "standard"),
        ("causal_conv1d", "standard"),
        ("chunk_gated_delta_rule", "standard"),
    }
    text = result.text
    assert "bound_kernel" not in text and "self.causal_conv1d_fn" not in text
    assert "self.chunk_gated_delta_rule(" not in text and "self.norm(core_attn_out, z)" not in text
    assert re.search(
        r"self\.veomni_causal_conv1d\(\s*mixed_qkv,\s*conv_weight,\s*self\.conv1d\.bias,\s*cu_seq_lens_q,",
        text,
    )
    assert re.search(
        r"self\.veomni_chunk_gated_delta_rule\(\s*query,\s*key,\s*value,\s*g,\s*beta,\s*None,\s*cu_seq_lens_q,",
        text,
    )
    assert re.search(
        r"self\.veomni_rms_norm_gated\(\s*core_attn_out,\s*z,\s*self\.norm\.weight,\s*eps=self\.layer_norm_epsilon,",
        text,
    )
    assert "self.norm = Qwen3_5RMSNormGated(self.head_v_dim, eps=self.layer_norm_epsilon)" in text


def test_cli_offers_no_migration_on_an_opslot_tree(tmp_path) -> None:
    """On a bare copy of the wheel (an OpSlot-generation tree, target-api auto) `--fix --unsafe-fixes` leaves the
    spec as it is: the tree defines neither `VeomniOp` nor `VeomniKernel`, so NPU201-203 say what the migration
    needs and offer no fix (issue 9)."""
    import subprocess
    import sys

    from tests.corpus import veomni_models_copy

    veomni_models_copy(tmp_path)
    spec = tmp_path / "veomni" / "models" / "transformers" / "seed_oss" / "seed_oss_gpu_patch_gen_config.py"
    original = spec.read_text()
    cmd = [
        sys.executable,
        "-m",
        "npu_lint",
        "check",
        "--select",
        "NPU2",
        "--fix",
        "--unsafe-fixes",
        str(spec),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert spec.read_text() == original
    assert "NPU201" in result.stdout and "OpSlot generation" in result.stdout
    assert "nothing to fix here until the tree moves to VeomniOp or VeomniKernel" in result.stdout
