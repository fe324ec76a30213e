# NPU707: planted example (see examples/README.md)
from veomni.patchgen.patch_spec import PatchConfig

config = PatchConfig(
    source_module="transformers.models.qwen2_5_omni.modeling_qwen2_5_omni", target_file="x.py"
)


@config.override_method("Qwen2_5OmniThinkerForConditionalGeneration.get_audio_features")
def omni_audio_features(self, input_features, feature_attention_mask=None, audio_feature_lengths=None):
    lengths = audio_feature_lengths
    out = self.audio_tower(input_features, aftercnn_lens=lengths)
    return out.last_hidden_state
