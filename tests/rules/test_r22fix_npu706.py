"""Issue 20 (round 22's multimodal miss): NPU706 reads a tower's input layout from its own `dummy_forward` and
reports a forward that gathers (or slices) that input along the axis the dummy gives to a feature size, the
permute to the layout it reads dropped."""

from __future__ import annotations

from tests.rules.snippets import lint_snippet

SPEC = "veomni/models/transformers/toy_omni/toy_omni_gpu_patch_gen_config.py"

TEMPLATE = """
import torch
from veomni.distributed.parallel_state import get_parallel_state
from veomni.distributed.sequence_parallel import gather_outputs
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(source_module="transformers.models.toy_omni.modeling_toy_omni", target_file="x_gpu.py")


@config.override_method("ToyAudioEncoder.forward")
def toy_audio_forward_patched(self, input_features, feature_lens=None):
    {entry}
    if get_parallel_state().sp_enabled:
        input_features = gather_outputs(input_features, gather_dim=1, group=get_parallel_state().sp_group)
    chunks = input_features.T.split(feature_lens.tolist(), dim=0)
    return self.encode(chunks)


@config.override_method("ToyAudioEncoder.dummy_forward")
def toy_audio_dummy_forward_patched(self):
    min_len = self.n_window * 2
    input_features = torch.zeros((min_len, self.num_mel_bins), dtype=self.conv.weight.dtype, device=self.device)
    feature_lens = torch.tensor([min_len], dtype=torch.long, device=self.device)
    return self({call})
"""

KEYWORD = "input_features=input_features, feature_lens=feature_lens"


def lint(entry: str, call: str = KEYWORD) -> list:
    return lint_snippet(SPEC, TEMPLATE.format(entry=entry, call=call), ["NPU706"])


def test_input_kept_in_the_dummy_layout_and_gathered_on_the_feature_axis() -> None:
    diags = lint("input_features = input_features.contiguous()  # (len, num_mel_bins)")
    assert [d.line for d in diags] == [11]
    assert "`gather_outputs` at line 13 takes its dim 1, `num_mel_bins` in that layout" in diags[0].message


def test_input_permuted_to_the_layout_the_forward_reads_is_quiet() -> None:
    assert not lint("input_features = input_features.permute(1, 0)  # -> (num_mel_bins, len)")
    assert not lint("input_features = input_features.transpose(0, 1)")
    assert not lint("input_features = input_features.T")


def test_positional_dummy_call_and_a_dropped_line() -> None:
    # the permute deleted outright: the finding lands on the first read of the input, the gather itself
    diags = lint("pass", call="input_features, feature_lens")
    assert [d.line for d in diags] == [13]


def test_dummy_without_a_feature_axis_says_nothing() -> None:
    text = TEMPLATE.format(entry="pass", call=KEYWORD).replace("self.num_mel_bins", "self.n_frames")
    assert not lint_snippet(SPEC, text, ["NPU706"])


def test_dummy_built_with_new_zeros_and_positional_sizes() -> None:
    text = TEMPLATE.format(entry="pass", call=KEYWORD).replace(
        "torch.zeros((min_len, self.num_mel_bins), dtype=self.conv.weight.dtype, device=self.device)",
        "self.conv.weight.new_zeros(min_len, self.num_mel_bins)",
    )
    assert "new_zeros" in text
    assert [d.line for d in lint_snippet(SPEC, text, ["NPU706"])] == [13]
    assert not lint_snippet(
        SPEC, text.replace("    pass\n", "    input_features = input_features.t()\n"), ["NPU706"]
    )
