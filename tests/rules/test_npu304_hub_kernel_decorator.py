"""NPU304: a kernels-hub decorator in VeOmni model code whose hub kernel transformers maps for no NPU. The
hub mapping is read from a stand-in transformers tree (tmp_path), so the devices come from the tree read."""

from __future__ import annotations

import textwrap
from pathlib import Path

from npu_lint.core.astutil import use_transformers_root
from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni.upstream import hub_kernel_devices

_HUB = """
try:
    from kernels import Device, Mode, LayerRepository

    _KERNEL_MAPPING: dict = {
        "FusedExperts": {
            "cuda": {Mode.TRAINING: LayerRepository(repo_id="org/experts", layer_name="FusedExperts")},
            Device(type="rocm"): LayerRepository(repo_id="org/experts", layer_name="FusedExperts"),
        },
        "LayerNorm": {
            "cuda": LayerRepository(repo_id="org/norm", layer_name="LayerNorm"),
            "npu": LayerRepository(repo_id="org/norm", layer_name="LayerNorm"),
        },
    }
    _KERNEL_MAPPING["swish"] = {"xpu": None}
except ImportError:
    pass
"""


def _stand_in(tmp_path: Path) -> str:
    root = tmp_path / "transformers"
    (root / "integrations").mkdir(parents=True)
    (root / "integrations" / "hub_kernels.py").write_text(textwrap.dedent(_HUB))
    return str(root)


def _lint(code: str, path: str) -> list:
    return lint_source(SourceFile.from_text(path, textwrap.dedent(code).lstrip()), ["NPU304"], Settings())


_SPEC = "veomni/models_kernel/transformers/toy/toy_npu_patch_gen_config.py"


def test_devices_are_read_from_the_mapping_literal_and_its_later_entries(tmp_path: Path) -> None:
    with use_transformers_root(_stand_in(tmp_path)):
        assert hub_kernel_devices("FusedExperts") == ("cuda", "rocm")
        assert hub_kernel_devices("LayerNorm") == ("cuda", "npu")
        assert hub_kernel_devices("swish") == ("xpu",)
        assert hub_kernel_devices("Unmapped") is None


def test_aliased_decorators_on_a_class_and_a_function(tmp_path: Path) -> None:
    code = """
    from torch import nn
    from transformers.integrations.hub_kernels import use_kernel_forward_from_hub as hub_forward
    from transformers.integrations.hub_kernels import use_kernel_func_from_hub


    @config.replace_class("ToySparseBlock")
    @hub_forward("FusedExperts")
    class PatchedToySparseBlock(nn.Module):
        pass


    @config.replace_function("toy_act")
    @use_kernel_func_from_hub("swish")
    def toy_act_patched(x):
        return x


    @use_kernel_forward_from_hub("LayerNorm")
    class ToyNorm(nn.Module):
        pass


    @hub_forward("Unmapped")
    class ToyOther(nn.Module):
        pass
    """
    with use_transformers_root(_stand_in(tmp_path)):
        diags = _lint(code, _SPEC)
    assert [d.line for d in diags] == [7, 13]
    assert "maps for cuda, rocm and not for npu" in diags[0].message
    assert "replace the forward of `PatchedToySparseBlock`" in diags[0].message
    assert "replace the function `toy_act_patched`" in diags[1].message


def test_upstream_and_generated_files_are_left_alone(tmp_path: Path) -> None:
    code = """
    from transformers.integrations.hub_kernels import use_kernel_forward_from_hub


    @use_kernel_forward_from_hub("FusedExperts")
    class ToySparseBlock:
        pass
    """
    with use_transformers_root(_stand_in(tmp_path)):
        assert _lint(code, "transformers/models/toy/modeling_toy.py") == []
        assert _lint(code, "veomni/models/transformers/toy/generated/patched_modeling_toy_gpu.py") == []
        assert len(_lint(code, "veomni/models/transformers/toy/toy_gpu_patch_gen_config.py")) == 1
