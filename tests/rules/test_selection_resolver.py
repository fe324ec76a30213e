"""The device selection resolver (npu_lint/veomni/selection.py) that NPU502 and NPU233 share: a choice of the
model's NPU or GPU module written through an alias, a ``not`` form, a helper returning the flag, an import alias
or an early return is the same choice to both rules (quiet), in every region of a tree; a choice that is not the
device's (an alias joined with another condition, a name bound to a constant, a path with no test) still fires."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from npu_lint.veomni import registration, selection
from tests.rules.snippets import lint_snippet

REPO = Path(__file__).resolve().parents[2]

# one registration function choosing by `{test}` after `{setup}` (module-level `{module}`)
_CHOICE = """
from veomni.utils.device import IS_NPU_AVAILABLE
{module}

def {func}(architecture: str):
    {setup}
    if {test}:
        from .generated.patched_modeling_{m}_npu import {cls}
    else:
        from .generated.patched_modeling_{m}_gpu import {cls}
    return {cls}
"""

_QUIET = [
    # (module-level code, set-up line in the function, the test)
    ("", "use_npu_module = IS_NPU_AVAILABLE", "use_npu_module"),
    ("", "on_ascend: bool = IS_NPU_AVAILABLE", "on_ascend"),
    ("", "pick = bool(IS_NPU_AVAILABLE)", "pick"),
    ("", "on_gpu = not IS_NPU_AVAILABLE", "not on_gpu"),
    ("_NPU_HOST = IS_NPU_AVAILABLE", "pass", "_NPU_HOST"),
    ("def _select_npu():\n    return IS_NPU_AVAILABLE\n", "pass", "_select_npu()"),
    ('def _want_npu():\n    """On Ascend."""\n    return bool(IS_NPU_AVAILABLE)\n', "pass", "_want_npu()"),
    ("_ascend = lambda: IS_NPU_AVAILABLE", "pass", "_ascend()"),
    ("from veomni.utils.device import IS_NPU_AVAILABLE as ON_ASCEND", "pass", "ON_ASCEND"),
    (
        "from veomni.utils.import_utils import is_torch_npu_available",
        "flag = is_torch_npu_available()",
        "flag",
    ),
    ("from veomni.utils.device import get_device_type", 'kind = get_device_type() == "npu"', "kind is True"),
    ("from veomni.utils.device import IS_CUDA_AVAILABLE", "cuda_host = IS_CUDA_AVAILABLE", "not cuda_host"),
]

# the same shapes in other regions of a tree (the OpSlot tree, the VeomniOp tree, seed_omni, diffusers)
_REGIONS = [
    ("veomni/models/transformers/qwen3/__init__.py", "register_qwen3_modeling", "qwen3", "Qwen3ForCausalLM"),
    (
        "veomni/models_kernel/transformers/glm4/__init__.py",
        "register_glm4_modeling",
        "glm4",
        "Glm4ForCausalLM",
    ),
    ("veomni/models/seed_omni/encoder/vit/__init__.py", "load_vit_modeling", "vit", "VitEncoder"),
    ("veomni/models/diffusers/wan/__init__.py", "get_wan_transformer", "wan", "WanTransformer3DModel"),
]


def _choice(module: str, setup: str, test: str, region: tuple[str, str, str, str]) -> tuple[str, str]:
    path, func, m, cls = region
    return path, textwrap.dedent(_CHOICE).format(
        module=module, setup=setup, test=test, func=func, m=m, cls=cls
    )


def _static(text: str) -> list[str]:
    return [s.gpu_module for s in registration.find_static_imports(ast.parse(textwrap.dedent(text)))]


@pytest.mark.parametrize("region", _REGIONS, ids=[r[2] for r in _REGIONS])
@pytest.mark.parametrize("module,setup,test", _QUIET)
def test_equivalent_choices_are_quiet(
    module: str, setup: str, test: str, region: tuple[str, str, str, str]
) -> None:
    path, text = _choice(module, setup, test, region)
    assert _static(text) == [], text  # NPU502 reads it as a switch
    assert lint_snippet(path, text, ["NPU233", "NPU508"]) == [], text  # and NPU233 as the device's own


@pytest.mark.parametrize(
    "text",
    [
        # an early return on the NPU branch: the GPU import after it never runs on Ascend
        """
        def register_toy_modeling(architecture):
            if IS_NPU_AVAILABLE:
                from .generated.patched_modeling_toy_npu import ToyModel
                return ToyModel
            from .generated.patched_modeling_toy_gpu import ToyModel
            return ToyModel
        """,
        """
        def _on_gpu():
            return not IS_NPU_AVAILABLE


        def build(architecture):
            if not _on_gpu():
                from .generated.patched_modeling_toy_npu import ToyModel
                return ToyModel
            from .generated.patched_modeling_toy_gpu import ToyModel
            return ToyModel
        """,
        # a type-only import never runs
        """
        from typing import TYPE_CHECKING

        if TYPE_CHECKING:
            from .generated.patched_modeling_toy_gpu import ToyModel
        """,
    ],
)
def test_npu502_quiet_where_ascend_never_runs_the_gpu_import(text: str) -> None:
    assert _static(text) == []


@pytest.mark.parametrize(
    "text",
    [
        # an alias bound to something that is no device probe
        """
        def register_toy_modeling(architecture):
            use_npu_module = False
            if use_npu_module:
                from .generated.patched_modeling_toy_npu import ToyModel
            else:
                from .generated.patched_modeling_toy_gpu import ToyModel
            return ToyModel
        """,
        # a helper with a parameter: what it returns depends on the caller
        """
        def _pick(architecture):
            return "Causal" in architecture


        def register_toy_modeling(architecture):
            if _pick(architecture):
                from .generated.patched_modeling_toy_npu import ToyModel
            else:
                from .generated.patched_modeling_toy_gpu import ToyModel
            return ToyModel
        """,
        # the alias is rebound: no single expression stands for it
        """
        def register_toy_modeling(architecture):
            chosen = IS_NPU_AVAILABLE
            chosen = "Causal" in architecture
            if chosen:
                from .generated.patched_modeling_toy_npu import ToyModel
            else:
                from .generated.patched_modeling_toy_gpu import ToyModel
            return ToyModel
        """,
        # an early return on the GPU side only: Ascend falls through to the GPU import
        """
        def build_wan(architecture):
            if IS_NPU_AVAILABLE:
                pass
            from .generated.patched_modeling_wan_gpu import WanModel
            return WanModel
        """,
    ],
)
def test_npu502_still_fires(text: str) -> None:
    assert _static(text) != []


@pytest.mark.parametrize("region", _REGIONS, ids=[r[2] for r in _REGIONS])
@pytest.mark.parametrize(
    "module,setup,test",
    [
        ("", 'use_npu_module = IS_NPU_AVAILABLE and "Causal" in architecture', "use_npu_module"),
        ('def _npu_for(arch="x"):\n    return IS_NPU_AVAILABLE\n', "pass", "_npu_for() or FORCE"),
        ("_NPU = IS_NPU_AVAILABLE or DEBUG_NPU", "pass", "_NPU"),
        ("", "gpu_side = not IS_NPU_AVAILABLE", "gpu_side"),
    ],
)
def test_npu233_reads_aliases_of_a_narrowed_or_wrong_choice(
    module: str, setup: str, test: str, region: tuple[str, str, str, str]
) -> None:
    path, text = _choice(module, setup, test, region)
    found = lint_snippet(path, text, ["NPU233", "NPU508"])
    assert found, text


def test_host_holds_through_the_resolver() -> None:
    tree = ast.parse(
        textwrap.dedent(
            """
            from veomni.utils.device import IS_NPU_AVAILABLE as ON_ASCEND
            _gpu = lambda: not ON_ASCEND

            def f():
                flag = not _gpu()
                return flag
            """
        )
    )
    choice = selection.DeviceChoice(tree)
    func = tree.body[-1]
    assert isinstance(func, ast.FunctionDef)
    test = ast.parse("flag", mode="eval").body
    assert choice.holds(test, "npu", func) is True
    assert choice.holds(test, "gpu", func) is False
    assert choice.decides(test, func)
    other = ast.parse("flag and x", mode="eval").body
    assert choice.holds(other, "npu", func) is None
    assert choice.holds(other, "gpu", func) is False


def test_npu502_quiet_on_a_package_choosing_through_an_alias(tmp_path: Path) -> None:
    """The round-21 control: the VeomniOp tree's ``__init__`` with ``use_npu_module = IS_NPU_AVAILABLE``."""
    pkg = tmp_path / "veomni" / "models_kernel" / "transformers" / "qwen3"
    (pkg / "generated").mkdir(parents=True)
    for rel in (
        "generated/__init__.py",
        "generated/patched_modeling_qwen3_gpu.py",
        "generated/patched_modeling_qwen3_npu.py",
        "qwen3_gpu_patch_gen_config.py",
        "qwen3_npu_patch_gen_config.py",
    ):
        (pkg / rel).write_text("")
    init = textwrap.dedent(
        """
        from ....utils.device import IS_NPU_AVAILABLE
        from ...loader import MODELING_REGISTRY


        @MODELING_REGISTRY.register("qwen3")
        def register_qwen3_modeling(architecture: str):
            use_npu_module = IS_NPU_AVAILABLE
            if use_npu_module:
                from .generated.patched_modeling_qwen3_npu import Qwen3ForCausalLM
            else:
                from .generated.patched_modeling_qwen3_gpu import Qwen3ForCausalLM
            return Qwen3ForCausalLM
        """
    )
    (pkg / "__init__.py").write_text(init)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "npu_lint", "check", "--no-cache", "--select", "NPU502,NPU233", str(pkg)]
    quiet = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    (pkg / "__init__.py").write_text(
        init.replace("use_npu_module = IS_NPU_AVAILABLE", "use_npu_module = False")
    )
    loud = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert "NPU502" in loud.stdout, loud.stdout + loud.stderr


@pytest.mark.parametrize(
    "path,text",
    [
        (
            "veomni/models/transformers/glm4/__init__.py",
            """
            import torch


            def register_glm4_modeling(architecture):
                on_cuda = torch.cuda.is_available()
                if not on_cuda:
                    from .generated.patched_modeling_glm4_npu import Glm4Model
                else:
                    from .generated.patched_modeling_glm4_gpu import Glm4Model
                return Glm4Model
            """,
        ),
        (
            "veomni/ops/kernels/rotary/__init__.py",
            """
            from veomni.utils.device import IS_CUDA_AVAILABLE

            _GPU = IS_CUDA_AVAILABLE


            def _cuda_host():
                return _GPU


            def load_rotary():
                if _cuda_host():
                    from .triton_rotary import apply_rotary
                else:
                    from .npu_rotary import apply_rotary
                return apply_rotary
            """,
        ),
        (
            "veomni/models/seed_omni/encoder/vit/__init__.py",
            """
            from veomni.utils.device import IS_CUDA_AVAILABLE as HAS_CUDA


            def build_vit():
                if HAS_CUDA:
                    from .generated.patched_modeling_vit_gpu import Vit
                    return Vit
                from .generated.patched_modeling_vit_npu import Vit
                return Vit
            """,
        ),
    ],
)
def test_npu236_reads_aliases_of_the_cuda_probe(path: str, text: str) -> None:
    assert [d.code for d in lint_snippet(path, text, ["NPU236"])] == ["NPU236"]


def test_npu236_alias_of_the_npu_probe_is_quiet() -> None:
    text = """
    def register_glm4_modeling(architecture):
        on_npu = IS_NPU_AVAILABLE
        if on_npu:
            from .generated.patched_modeling_glm4_npu import Glm4Model
        else:
            from .generated.patched_modeling_glm4_gpu import Glm4Model
        return Glm4Model
    """
    assert lint_snippet("veomni/models/transformers/glm4/__init__.py", text, ["NPU236"]) == []
