"""The documented examples of the NPU5xx project rules, each run in a small tree built in tmp_path.

tests/rules/test_rule_examples.py covers file rules only; a project rule needs the rest of its model package, so
each rule gets a context (the other files of the package) here. Every bad example must be reported, every good
example not, and a bad example's ``fixed`` text is what ``--fix --unsafe-fixes`` writes.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from npu_lint.docs import precision_text
from npu_lint.rules.base import PROJECT_REGISTRY, load_rule_modules

load_rule_modules()
# the project rules: packaging's, and NPU732 (the model types of a VLM, multimodal), which reads the same package
RULES = {
    code: rule
    for code, rule in sorted(PROJECT_REGISTRY.items())
    if code.startswith("NPU5") or code == "NPU732"
}
TOY = "veomni/models/transformers/toy"

GPU_SPEC = """
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(
    source_module="transformers.models.toy.modeling_toy",
    target_file="patched_modeling_toy_gpu.py",
    description="Toy model with VeOmni patches",
)


@config.override_method("ToyRMSNorm.forward")
def toy_rmsnorm_forward_patched(self, hidden_states):
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    return self.weight * hidden_states * torch.rsqrt(variance + self.variance_epsilon)


@config.override_method("ToyModel.forward")
def toy_model_forward_patched(self, input_ids):
    hidden_states = self.embed_tokens(input_ids)
    return self.norm(hidden_states)
"""
NPU_SPEC = """
from copy import deepcopy

from veomni.models.transformers.toy.toy_gpu_patch_gen_config import config as gpu_config

config = deepcopy(gpu_config)
config.target_file = "patched_modeling_toy_npu.py"
"""
GENERATED = """
# AUTO-GENERATED FILE - DO NOT EDIT DIRECTLY
# Source: transformers.models.toy.modeling_toy
# Based on: transformers==5.9.0
from torch import nn


class ToyModel(nn.Module):
    config: ToyTextConfig


class ToyForCausalLM(nn.Module):
    config: ToyTextConfig


class ToyForTokenClassification(nn.Module):
    config: ToyTextConfig


class ToyForConditionalGeneration(nn.Module):
    config: ToyConfig
"""

CONTEXT: dict[str, dict[str, str]] = {
    "NPU501": {},
    "NPU502": {
        f"{TOY}/toy_gpu_patch_gen_config.py": GPU_SPEC,
        f"{TOY}/toy_npu_patch_gen_config.py": NPU_SPEC,
    },
    "NPU503": {
        f"{TOY}/toy_gpu_patch_gen_config.py": GPU_SPEC,
        f"{TOY}/generated/patched_modeling_toy_gpu.py": GENERATED,
    },
    "NPU504": {f"{TOY}/toy_gpu_patch_gen_config.py": GPU_SPEC},
    "NPU505": {
        f"{TOY}/toy_gpu_patch_gen_config.py": GPU_SPEC.split('\n\n@config.override_method("ToyModel')[0]
    },
    "NPU506": {"veomni/__init__.py": "", "veomni/ops/__init__.py": ""},
    "NPU507": {
        f"{TOY}/toy_gpu_patch_gen_config.py": GPU_SPEC
        + """
config.add_import("veomni.utils.model_outputs", names=["ToyCausalLMOutputWithLogProbs"])
config.drop_import_names("ToyCausalLMOutputWithPast")
"""
    },
    "NPU513": {f"{TOY}/toy_gpu_patch_gen_config.py": GPU_SPEC},
}
CONTEXT["NPU732"] = CONTEXT["NPU503"]
GOOD_CONTEXT = {"NPU501": {f"{TOY}/toy_gpu_patch_gen_config.py": GPU_SPEC}}


def _installed() -> str:
    """The installed transformers release (make test installs 5.9.0: a missing one fails the test)."""
    try:
        return importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        pytest.fail("transformers is not installed: pip install -e '.[dev]' (make test does)")


def _build(root: Path, files: dict[str, str], example_path: str, example_source: str) -> None:
    for rel, content in {**files, example_path: example_source}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(content).lstrip("\n"))
    (root / "veomni" / "ops").mkdir(parents=True, exist_ok=True)


def _run(root: Path, code: str, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "npu_lint",
            "check",
            "--no-cache",
            "--select",
            code,
            "--output-format",
            "concise",
            *extra,
            ".",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def _source(code: str, example) -> str:  # noqa: ANN001
    source = example.source
    if code == "NPU506" and "5.9.0" in source:  # the good example pins what is installed
        source = source.replace("5.9.0", _installed())
    return source


def test_every_project_rule_is_documented() -> None:
    assert set(RULES) == {
        "NPU501",
        "NPU502",
        "NPU503",
        "NPU504",
        "NPU505",
        "NPU506",
        "NPU507",
        "NPU513",
        "NPU732",
    }
    for code, rule in RULES.items():
        assert rule.name and rule.summary and rule.why and rule.fix_safety and precision_text(rule), code
        assert rule.bad and rule.good, code


BAD = [pytest.param(c, i, ex, id=f"{c}-bad{i}") for c, r in RULES.items() for i, ex in enumerate(r.bad, 1)]
GOOD = [pytest.param(c, i, ex, id=f"{c}-good{i}") for c, r in RULES.items() for i, ex in enumerate(r.good, 1)]


@pytest.mark.parametrize("code,index,example", BAD)
def test_bad_example(tmp_path: Path, code: str, index: int, example) -> None:  # noqa: ANN001
    if code == "NPU506":
        assert _installed() != "4.0.0", "the bad example pins the installed transformers: it cannot differ"
    _build(tmp_path, CONTEXT[code], example.path, _source(code, example))
    res = _run(tmp_path, code)
    assert f"{code} " in res.stdout, res.stdout + res.stderr
    assert f"{example.path}:" in res.stdout
    if example.expected is not None:
        _run(tmp_path, code, "--fix", "--unsafe-fixes")
        assert (tmp_path / example.path).read_text() == example.expected
        assert f"{code} " not in _run(tmp_path, code).stdout


@pytest.mark.parametrize("code,index,example", GOOD)
def test_good_example(tmp_path: Path, code: str, index: int, example) -> None:  # noqa: ANN001
    context = GOOD_CONTEXT.get(code, CONTEXT[code])
    _build(tmp_path, context, example.path, _source(code, example))
    res = _run(tmp_path, code)
    assert f"{code} " not in res.stdout, res.stdout + res.stderr


def test_npu506_reports_mixed_banners(tmp_path: Path) -> None:
    installed = _installed()
    files = {
        f"{TOY}/toy_gpu_patch_gen_config.py": GPU_SPEC,
        f"{TOY}/generated/patched_modeling_toy_gpu.py": GENERATED.replace("5.9.0", installed),
        f"{TOY}/generated/patched_modeling_toy_npu.py": GENERATED.replace("5.9.0", "0.0.1"),
        f"{TOY}/generated/patched_modeling_toy_old.py": GENERATED.replace("5.9.0", installed),
    }
    _build(tmp_path, files, "veomni/__init__.py", "")
    res = _run(tmp_path, "NPU506")
    lines = [line for line in res.stdout.splitlines() if " NPU506 " in line]
    assert len(lines) == 1, res.stdout
    assert "patched_modeling_toy_npu.py:3:" in lines[0] and "0.0.1" in lines[0]


def test_npu506_installed_differs_from_pin(tmp_path: Path) -> None:
    assert _installed() != "0.0.1"
    _build(
        tmp_path,
        {"veomni/__init__.py": ""},
        "pyproject.toml",
        '[project]\ndependencies = ["transformers==0.0.1"]\n',
    )
    res = _run(tmp_path, "NPU506")
    assert res.stdout.count(" NPU506 ") == 1, res.stdout
    assert "pyproject.toml:2:" in res.stdout


def test_npu506_pin_prefers_project_dependencies(tmp_path: Path) -> None:
    from npu_lint.rules.packaging._shared import _repo_pin

    (tmp_path / "pyproject.toml").write_text(
        '[project.optional-dependencies]\nold = ["transformers==4.57.0"]\n\n'
        '[project]\nname = "v"\ndependencies = [\n    "transformers==5.9.0; python_version >= \'3.10\'",\n]\n'
    )
    assert _repo_pin(str(tmp_path)) == ("5.9.0", str(tmp_path / "pyproject.toml"), 7)
    (tmp_path / "pyproject.toml").write_text('[project]\ndependencies = ["torch"]\n')
    assert _repo_pin(str(tmp_path)) is None


def test_npu503_lines_of_an_unregistered_helper_and_an_unreturned_head(tmp_path: Path) -> None:
    """Registration read however it is written, and findings where the missing piece belongs: the helper that
    loads the unregistered type's class (NPU732, a VLM's model types), the architecture dispatch that returns an
    imported head for nothing (NPU503)."""
    init = f"{TOY}/__init__.py"
    rule = RULES["NPU732"]
    helper = next(ex for ex in rule.bad if "never registered" in (ex.title or ""))
    _build(tmp_path / "helper", CONTEXT["NPU503"], init, helper.source)
    out = _run(tmp_path / "helper", "NPU732").stdout
    assert f"{init}:11:" in out and "`register_toy_text_modeling` loads it" in out, out
    assert " NPU503 " not in _run(tmp_path / "helper", "NPU503").stdout  # no model type reported twice
    dispatch = textwrap.dedent(
        """
        from ...loader import MODELING_REGISTRY


        def build(architecture: str):
            from .generated.patched_modeling_toy_gpu import ToyForCausalLM, ToyForConditionalGeneration

            if "ForConditionalGeneration" in architecture:
                return ToyForConditionalGeneration
            return ToyForCausalLM


        for name in ("toy", "toy_text"):
            MODELING_REGISTRY[name] = build
        """
    )
    _build(tmp_path / "ok", CONTEXT["NPU503"], init, dispatch)
    assert "NPU503" not in _run(tmp_path / "ok", "NPU503").stdout
    dropped = dispatch.replace(
        '    if "ForConditionalGeneration" in architecture:\n        return ToyForConditionalGeneration\n',
        '    if "Vision" in architecture:\n        return None\n',
    )
    assert dropped != dispatch
    _build(tmp_path / "dropped", CONTEXT["NPU503"], init, dropped)
    out = _run(tmp_path / "dropped", "NPU503").stdout
    assert f"{init}:7:" in out and "`ToyForConditionalGeneration`" in out, out
