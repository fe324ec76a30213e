"""Issue 20 (recall): contracts read from the tree being linted: an in-tree norm's weight initialisation for its
kernel wrapper, the data contract's IGNORE_INDEX and media placeholders, and the composite configs of
transformers (read from the installed source)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from npu_lint.core.config import Settings
from npu_lint.core.source import SourceFile
from npu_lint.engine import lint_source
from npu_lint.veomni.constants import tree_constant
from npu_lint.veomni.project import Project
from npu_lint.veomni.upstream import composite_config_fields


def _write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def _codes(path: Path, codes: list[str], root: Path | None = None) -> list[tuple[int, str]]:
    src = SourceFile.from_text(str(path), path.read_text(encoding="utf-8"))
    project = Project(root=str(root)) if root is not None else None
    return sorted((d.line, d.code) for d in lint_source(src, codes, Settings(), project))


NORM = """
import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.{init}(dim))
"""

WRAPPER = """
import torch_npu


def rms_norm_forward_npu(self, x):
    return torch_npu.npu_rms_norm(x, {weight}, epsilon=self.{eps})[0]
"""


def test_kernel_wrapper_of_an_in_tree_norm(tmp_path: Path) -> None:
    pkg = "veomni/models/transformers/toy"
    _write(tmp_path, f"{pkg}/modeling_toy.py", NORM.format(init="ones"))
    wrapper = _write(tmp_path, f"{pkg}/npu_patch.py", WRAPPER.format(weight="1 + self.weight", eps="eps"))
    assert _codes(wrapper, ["NPU404", "NPU405"]) == [(6, "NPU404")]
    wrapper.write_text(textwrap.dedent(WRAPPER.format(weight="self.weight", eps="variance_epsilon")))
    assert _codes(wrapper, ["NPU404", "NPU405"]) == [(6, "NPU405")]
    wrapper.write_text(textwrap.dedent(WRAPPER.format(weight="self.weight", eps="eps")))
    assert _codes(wrapper, ["NPU404", "NPU405"]) == []


def test_offset_norm_in_tree_is_not_reported(tmp_path: Path) -> None:
    pkg = "veomni/models/transformers/toy"
    _write(tmp_path, f"{pkg}/modeling_toy.py", NORM.format(init="zeros"))
    wrapper = _write(tmp_path, f"{pkg}/npu_patch.py", WRAPPER.format(weight="1 + self.weight", eps="eps"))
    assert _codes(wrapper, ["NPU404"]) == []


def test_ignore_index_is_read_from_the_tree(tmp_path: Path) -> None:
    _write(tmp_path, "veomni/utils/constants.py", "IGNORE_INDEX = -1\nIMAGE_INPUT_INDEX = -200\n")
    assert tree_constant(str(tmp_path), "IGNORE_INDEX") == -1
    loss = _write(
        tmp_path,
        "veomni/ops/kernels/cross_entropy/eager.py",
        """
        def eager_ce(logits, labels, num_items_in_batch=None, ignore_index=-100, **kwargs):
            return fixed_cross_entropy(logits, labels, num_items_in_batch, ignore_index, **kwargs)
        """,
    )
    assert _codes(loss, ["NPU413"], tmp_path) == [(2, "NPU413")]
    loss.write_text(loss.read_text().replace("ignore_index=-100", "ignore_index=-1"))
    assert _codes(loss, ["NPU413"], tmp_path) == []


def test_composite_config_fields_come_from_the_installed_configs() -> None:
    found = composite_config_fields(
        "transformers.models.qwen3_vl.modeling_qwen3_vl", "Qwen3VLForConditionalGeneration"
    )
    assert found is not None
    name, mine, text = found
    assert name == "Qwen3VLConfig"
    assert "vocab_size" in text and "vocab_size" not in mine
    assert "image_token_id" in mine
    assert composite_config_fields("transformers.models.llama.modeling_llama", "LlamaForCausalLM") is None


def test_position_id_mapping_against_the_tree(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "veomni/utils/constants.py",
        "IGNORE_INDEX = -100\nIMAGE_INPUT_INDEX = -200\nVIDEO_INPUT_INDEX = -300\n",
    )
    spec = _write(
        tmp_path,
        "veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py",
        """
        import copy

        from veomni.patchgen.patch_spec import PatchConfig

        config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


        @config.override_method("Qwen3VLForConditionalGeneration.get_position_id_func")
        def qwen3_vl_get_position_id_func_patched(self):
            fake_config = copy.copy(self.config)
            fake_config.image_token_id = -200
            return fake_config
        """,
    )
    # the video placeholder is not mapped (the config has video_token_id and the tree defines VIDEO_INPUT_INDEX)
    assert _codes(spec, ["NPU704"], tmp_path) == [(12, "NPU704")]
    spec.write_text(spec.read_text().replace("= -200\n", "= -200\n    fake_config.video_token_id = -200\n"))
    assert _codes(spec, ["NPU704"], tmp_path) == [(13, "NPU704")]


SPEC_COPY = """
        import copy

        from veomni.patchgen.patch_spec import PatchConfig

        config = PatchConfig(source_module="transformers.models.qwen3_vl.modeling_qwen3_vl", target_file="x.py")


        @config.override_method("Qwen3VLForConditionalGeneration.get_position_id_func")
        def qwen3_vl_get_position_id_func_patched(self):
            fake_config = copy.copy(self.config)
            return fake_config
        """


def test_position_id_function_copies_the_config_without_a_mapping(tmp_path: Path) -> None:
    rel = "veomni/models/transformers/qwen3_vl/qwen3_vl_gpu_patch_gen_config.py"
    mine = tmp_path / "mine"
    _write(mine, "veomni/utils/constants.py", "IMAGE_INPUT_INDEX = -200\nVIDEO_INPUT_INDEX = -300\n")
    assert _codes(_write(mine, rel, SPEC_COPY), ["NPU704"], mine) == [(11, "NPU704")]
    # mapped in another form: setattr in a loop over the token-id names
    mapped = SPEC_COPY.replace(
        "    return fake_config",
        '    for attr in ("image_token_id", "video_token_id"):\n'
        "                setattr(fake_config, attr, IMAGE_INPUT_INDEX)\n"
        "            return fake_config",
    )
    assert "setattr" in mapped
    assert _codes(_write(mine, rel, mapped), ["NPU704"], mine) == []
    # without the tree's placeholders there is no contract to judge against
    other = tmp_path / "other"
    _write(other, "veomni/utils/constants.py", "IGNORE_INDEX = -100\n")
    assert _codes(_write(other, rel, SPEC_COPY), ["NPU704"], other) == []


def test_ignore_index_from_the_tree_loss_defaults(tmp_path: Path) -> None:
    """A tree without IGNORE_INDEX (the VeomniOp-era kernel tree): the default its loss entry point declares."""
    from npu_lint.veomni.constants import tree_ignore_index

    _write(
        tmp_path,
        "veomni/models_kernel/loss_utils/__init__.py",
        "def ForCausalLMLoss(logits=None, labels=None, vocab_size=None, ignore_index=-100, **kwargs):\n    pass\n",
    )
    assert tree_ignore_index(str(tmp_path)) == -100
    loss = _write(
        tmp_path,
        "veomni/models_kernel/transformers/toy/toy_gpu_patch_gen_config.py",
        """
        def toy_loss(self, logits, labels, **kwargs):
            return self.loss_function(logits=logits, labels=labels, ignore_index=-1, **kwargs)
        """,
    )
    assert _codes(loss, ["NPU413"], tmp_path) == [(3, "NPU413")]
    assert tree_ignore_index(None) is None
