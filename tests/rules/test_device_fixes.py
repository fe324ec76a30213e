"""NPU1xx / NPU6xx on whole files: each fixture under tests/fixtures/device/ is linted as a file of a VeOmni
model package and fixed (safe and unsafe fixes, to a fixpoint); the result must equal ``<name>.fixed.py``
exactly, and a second run must change nothing. ``legitimate.py`` holds device-neutral dispatch code that no
rule may report."""

from __future__ import annotations

from pathlib import Path

import pytest

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import fix_source, lint_source, parses
from npu_lint.rules.base import REGISTRY, load_rule_modules

load_rule_modules()
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "device"
CODES = sorted(c for c in REGISTRY if c.startswith(("NPU1", "NPU6")))
MODEL_DIR = "veomni/models/transformers/toy"


def _source(name: str, directory: str = MODEL_DIR) -> SourceFile:
    text = (FIXTURES / f"{name}.py").read_text(encoding="utf-8")
    return SourceFile.from_text(f"{directory}/{name}.py", text)


@pytest.mark.parametrize("name", ["runtime_calls", "allocations", "collectives"])
def test_fix_matches_expected_file(name: str) -> None:
    src = _source(name)
    expected = (FIXTURES / f"{name}.fixed.py").read_text(encoding="utf-8")
    outcome = fix_source(src, CODES, Settings(), unsafe=True)
    assert outcome.text == expected
    assert parses(outcome.text)
    again = fix_source(SourceFile.from_text(src.path, outcome.text), CODES, Settings(), unsafe=True)
    assert again.text == outcome.text, "a second fix run changed the file"


def test_expected_findings_per_fixture() -> None:
    counts = {}
    for name in ("runtime_calls", "allocations", "collectives"):
        for diag in lint_source(_source(name), CODES, Settings()):
            counts[(name, diag.code)] = counts.get((name, diag.code), 0) + 1
    assert counts == {
        ("runtime_calls", "NPU102"): 14,
        ("runtime_calls", "NPU104"): 2,
        ("allocations", "NPU103"): 5,
        ("collectives", "NPU601"): 5,
    }


def test_remaining_after_fix_are_the_unfixable_ones() -> None:
    outcome = fix_source(_source("runtime_calls"), CODES, Settings(), unsafe=True)
    assert [(d.code, d.line) for d in outcome.remaining] == [("NPU102", 41)]  # get_device_capability
    outcome = fix_source(_source("collectives"), CODES, Settings(), unsafe=True)
    assert sorted(d.fix.applicability.value for d in outcome.remaining if d.fix) == ["display", "display"]


def test_safe_only_run_leaves_the_unsafe_fixes() -> None:
    src = SourceFile.from_text(
        f"{MODEL_DIR}/guard.py",
        "import torch\n\n\ndef f():\n    if torch.cuda.is_available():\n        return 1\n",
    )
    safe = fix_source(src, CODES, Settings(), unsafe=False)
    assert safe.text == src.text
    unsafe = fix_source(src, CODES, Settings(), unsafe=True)
    assert 'get_device_type() != "cpu"' in unsafe.text


def test_legitimate_dispatch_is_clean() -> None:
    assert lint_source(_source("legitimate", "veomni/trainer"), CODES, Settings()) == []


def test_spec_fix_adds_config_import() -> None:
    text = (
        "import torch\n\nfrom veomni.patchgen.patch_spec import PatchConfig\n\n\n"
        'config = PatchConfig(source_module="transformers.models.toy.modeling_toy", target_file="t.py")\n\n\n'
        '@config.override_method("ToyModel.forward")\n'
        "def toy_forward(self, hidden_states):\n"
        "    torch.cuda.synchronize()\n"
        "    return hidden_states\n"
    )
    src = SourceFile.from_text(f"{MODEL_DIR}/toy_gpu_patch_gen_config.py", text)
    out = fix_source(src, CODES, Settings(), unsafe=True).text
    assert "from veomni.utils.device import synchronize\n" in out
    assert 'config.add_import("veomni.utils.device", names=["synchronize"])\n' in out
    assert "    synchronize()\n" in out


def test_generated_file_fixes_are_display_only() -> None:
    text = "import torch\n\n\ndef f(x: torch.Tensor):\n    torch.cuda.synchronize()\n    return x.cuda()\n"
    src = SourceFile.from_text(f"{MODEL_DIR}/generated/patched_modeling_toy_gpu.py", text)
    diags = lint_source(src, CODES, Settings())
    assert {d.code for d in diags} == {"NPU101", "NPU102"}
    assert all(d.fix is None or d.fix.applicability.value == "display" for d in diags)
    assert fix_source(src, CODES, Settings(), unsafe=True).text == text


def test_npu602_only_in_model_code() -> None:
    text = "import torch.distributed as dist\n\n\ndef rank():\n    return dist.get_rank()\n"
    model = lint_source(SourceFile.from_text(f"{MODEL_DIR}/r.py", text), ["NPU602"], Settings())
    trainer = lint_source(SourceFile.from_text("veomni/trainer/r.py", text), ["NPU602"], Settings())
    assert [d.code for d in model] == ["NPU602"] and trainer == []


def test_relative_device_import_is_reused() -> None:
    text = (
        "import torch\n\nfrom ....utils.device import IS_NPU_AVAILABLE\n\n\n"
        "def f():\n    torch.cuda.empty_cache()\n    return IS_NPU_AVAILABLE\n"
    )
    out = fix_source(SourceFile.from_text(f"{MODEL_DIR}/m.py", text), CODES, Settings(), unsafe=True).text
    assert "from ....utils.device import IS_NPU_AVAILABLE, empty_cache\n" in out
    assert "veomni.utils.device" not in out


def test_npu101_leaves_other_cuda_apis_alone() -> None:
    text = (
        "import torch\n\n\n"
        "class Cache(torch.nn.Module):\n"
        "    def cuda(self, *args, **kwargs):\n"
        "        return super().cuda(*args, **kwargs)\n\n"
        "    def update(self, qtensor, meta):\n"
        "        self.quantizer.cuda(qtensor, meta=meta, device=self.keys.device)\n"
        "        return qtensor.cuda(non_blocking=True)\n"
    )
    diags = lint_source(SourceFile.from_text(f"{MODEL_DIR}/cache.py", text), ["NPU101"], Settings())
    assert [(d.line, d.code) for d in diags] == [(10, "NPU101")]


def test_not_is_available_becomes_a_cpu_check() -> None:
    text = (
        "import torch\n\n\ndef f():\n    if not torch.cuda.is_available():\n        return 0\n    return 1\n"
    )
    out = fix_source(SourceFile.from_text(f"{MODEL_DIR}/g.py", text), CODES, Settings(), unsafe=True).text
    assert '    if get_device_type() == "cpu":\n' in out
