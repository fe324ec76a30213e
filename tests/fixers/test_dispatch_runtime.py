"""The migrated code runs against a stand-in of the VeomniOp import surface (tests/fixtures/trees/
veomni_op_runtime, our own writing): it imports, its handles are built per instance from the ops config in
force when the model is constructed, and a second model built under another config leaves the first model's
handles untouched (the property module-global OpSlots lacked).

Needs torch (``pip install torch==2.13.0``, the CPU wheel; make test installs it): fails without it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from npu_lint.core.diagnostics import Applicability
from npu_lint.fixers.dispatch import migrate_source
from npu_lint.veomni import upstream
from npu_lint.veomni.profile import detect_profile

TESTS = Path(__file__).resolve().parents[1]
STANDIN = TESTS / "fixtures" / "trees" / "veomni_op_runtime"
CODEMOD = TESTS / "fixtures" / "codemod"


SCRIPT = textwrap.dedent(
    """
    import types
    import torch
    from veomni.ops.config import set_ops_config
    from veomni.models_kernel.transformers.toy import modeling_toy as m

    fused = types.SimpleNamespace(
        rotary_pos_emb_implementation="fused", swiglu_mlp_implementation="fused",
        rms_norm_implementation="fused",
    )
    set_ops_config(None)
    first_attn, first_mlp = m.ToyAttention(8), m.ToyMLP(8, 16)
    first = (first_attn.rope_slot.impl, first_mlp.mlp_slot.impl)
    set_ops_config(fused)
    second_attn, second_mlp = m.ToyCrossAttention(8), m.ToyMLP(8, 16)
    assert (first_attn.rope_slot.impl, first_mlp.mlp_slot.impl) == first == ("eager", "eager"), first
    assert (second_attn.rope_slot.impl, second_mlp.mlp_slot.impl) == ("fused", "fused")
    assert first_attn.rope_slot is not second_attn.rope_slot
    x = torch.randn(3, 3, 8)
    cos, sin = torch.ones(3, 8), torch.zeros(3, 8)
    assert first_attn(x, cos, sin).shape == (3, 3, 3)
    assert first_mlp(x).shape == (3, 3, 8)
    print("ok")
    """
)


@pytest.fixture(scope="module")
def torch_available() -> None:
    import importlib.util

    assert importlib.util.find_spec("torch") is not None, (
        "needs torch: pip install -e '.[verify]' (make test does)"
    )


def _install(tmp_path: Path, name: str) -> Path:
    tree = tmp_path / "tree"
    shutil.copytree(STANDIN, tree)
    package = tree / "veomni" / "models_kernel" / "transformers" / "toy"
    package.mkdir(parents=True)
    (package.parent / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    api = detect_profile(tree)
    source = (CODEMOD / f"{name}.py").read_text()
    with upstream.use_transformers_root(str(CODEMOD / "upstream" / "transformers")):
        result = migrate_source(source, str(package / "modeling_toy.py"), profile=api)
    assert result.applicability is Applicability.SAFE, result.reasons
    (package / "modeling_toy.py").write_text(result.text)
    return tree


def test_two_models_with_different_ops_configs(tmp_path: Path, torch_available: None) -> None:
    tree = _install(tmp_path, "module_rope_mlp")
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("ok")


def test_offset_norm_runs_with_the_raw_weight(tmp_path: Path, torch_available: None) -> None:
    tree = _install(tmp_path, "module_gemma_norm")
    script = textwrap.dedent(
        """
        import torch
        from veomni.models_kernel.transformers.toy import modeling_toy as m
        norm = m.ToyGemmaRMSNorm(8)
        assert (norm.norm_slot.op, norm.norm_slot.variant) == ("rms_norm", "qwen3_5")
        with torch.no_grad():
            norm.weight.fill_(0.5)
        x = torch.randn(2, 8)
        ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm.eps) * 1.5
        assert torch.allclose(norm(x), ref, atol=1e-5)
        print("ok")
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
